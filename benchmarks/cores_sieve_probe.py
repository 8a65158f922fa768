"""What CORES²'s sample sieve does, epoch by epoch: a callback that reads every training batch
through the network in evaluation mode (no random draw: the run's own stream is untouched) and
appends one JSON line per epoch to the file ``$NOISYLABELS_SIEVE_PROBE``: ``beta_t``, the next
epoch's learning rate, whether the sieve is on, the share of samples the sieve's rule keeps
(``kept_frac_rule``; before the sieve starts, what it would keep), the share of kept samples
whose noisy label is right (``kept_precision``), the share of correctly labeled samples kept
(``clean_recall``), the accuracy on the clean labels, the predicted classes' counts and the
largest share, the mean top probability and logit spread, the mean cross-entropy of right and
wrong labels, the class prior. docs/results.md ("What the sieve's start does") reads it::

    NOISYLABELS_SIEVE_PROBE=probe.jsonl PYTHONPATH=benchmarks noisylabels fit \
        --config configs/data/mnist.yaml --config configs/method/cores.yaml \
        --data.data_dir DATA --data.noise_rate 0.5 \
        --trainer.callbacks+=cores_sieve_probe.CoresProbe
"""

import json
import os

import lightning as L
import torch


class CoresProbe(L.Callback):
    """Appends one JSON line per training epoch of a CORES² run to ``$NOISYLABELS_SIEVE_PROBE``."""

    def on_train_epoch_start(self, trainer, m):
        self.s = {
            k: 0.0
            for k in (
                "n",
                "kept",
                "kept_right",
                "right",
                "right_kept",
                "maxp",
                "spread",
                "ce_right",
                "ce_wrong",
                "wrong",
                "pred_right",
            )
        }
        self.hist = torch.zeros(m.num_classes)

    def on_train_batch_end(self, trainer, m, outputs, batch, idx):
        was = m.net.training
        m.net.eval()  # no dropout draw: the run's random stream stays its own
        with torch.no_grad():
            logits = m(batch["image"]).float()
        m.net.train(was)
        with torch.no_grad():
            probs = logits.softmax(1)
            pred = probs.argmax(1)
            keep = m.sieve(logits, batch["label"])
            right = batch["label"] == batch["clean_label"]
            ce = torch.nn.functional.cross_entropy(logits, batch["label"], reduction="none")
            s = self.s
            s["n"] += len(pred)
            s["kept"] += keep.sum().item()
            s["kept_right"] += (keep & right).sum().item()
            s["right"] += right.sum().item()
            s["right_kept"] += (keep & right).sum().item()
            s["wrong"] += (~right).sum().item()
            s["maxp"] += probs.max(1).values.sum().item()
            s["spread"] += (logits.max(1).values - logits.min(1).values).sum().item()
            s["ce_right"] += ce[right].sum().item()
            s["ce_wrong"] += ce[~right].sum().item()
            s["pred_right"] += (pred == batch["clean_label"]).sum().item()
            self.hist += torch.bincount(pred.cpu(), minlength=m.num_classes).float()

    def on_train_epoch_end(self, trainer, m):
        s = self.s
        rec = {
            "epoch": trainer.current_epoch,
            "beta": float(m.beta_now),
            "lr": trainer.optimizers[0].param_groups[0]["lr"],
            "sieving": bool(m.sieving()),
            "kept_frac_rule": s["kept"] / s["n"],
            "kept_precision": s["kept_right"] / max(s["kept"], 1),
            "clean_recall": s["right_kept"] / max(s["right"], 1),
            "train_acc_clean": s["pred_right"] / s["n"],
            "pred_share_max": (self.hist.max() / self.hist.sum()).item(),
            "pred_hist": [int(x) for x in self.hist],
            "mean_maxp": s["maxp"] / s["n"],
            "mean_logit_spread": s["spread"] / s["n"],
            "ce_right": s["ce_right"] / max(s["right"], 1),
            "ce_wrong": s["ce_wrong"] / max(s["wrong"], 1),
            "prior": [round(float(x), 4) for x in m.prior],
            "train_loss": float(trainer.callback_metrics.get("train/loss", float("nan"))),
        }
        with open(os.environ["NOISYLABELS_SIEVE_PROBE"], "a") as fh:
            fh.write(json.dumps(rec) + "\n")
