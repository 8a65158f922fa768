"""Clothing1M on a tiny tree in the real distribution layout: small JPEGs written here, the real
annotation-file formats, a corrupt image, a missing image and keys that point outside the root."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
from torchvision.io import encode_jpeg

from noisylabels.data import Clothing1MDataModule
from noisylabels.data.clothing1m import ANNOTATION_FILES, read_label_kv
from noisylabels.data.files import is_safe_key
from noisylabels.data.samplers import ClassBalancedSampler

from conftest import CONFIGS, config_args, pair_params, pairs

NAMES = [
    "T-Shirt",
    "Shirt",
    "Knitwear",
    "Chiffon",
    "Sweater",
    "Hoodie",
    "Windbreaker",
    "Jacket",
    "Downcoat",
    "Suit",
    "Shawl",
    "Dress",
    "Vest",
    "Underwear",
]
UNSAFE = ["../outside.jpg", "/etc/hostname"]
# one of the 8 test images is corrupt: accept that share so the runs report a test accuracy
SMALL = [
    "--data.image_size",
    "32",
    "--data.resize_size",
    "36",
    "--data.max_skipped_fraction",
    "0.2",
]


def _key(i: int) -> str:
    return f"images/{i % 10}/{i % 100:02d}/{i:06d}.jpg"


def _write_jpeg(path: Path, label: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    h, w = 40 + seed % 7, 52 - seed % 5  # a few different sizes and aspect ratios
    image = torch.randint(0, 50, (3, h, w), generator=gen, dtype=torch.uint8)
    image[label % 3] += 12 * label  # class-dependent colour
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_jpeg(image, quality=90).numpy().tobytes())


def make_clothing1m(root: Path, n_train: int = 48, n_clean: int = 8, seed: int = 0) -> dict:
    """Write a tiny Clothing1M tree under ``root``; return facts about it for the asserts.

    ``n_train`` noisy training images (the first 12 also have clean labels, one is a corrupt
    file, one is missing), ``n_clean`` images in each of the clean train/val/test lists (one
    corrupt test image), two unsafe keys in the noisy files and a real file just outside the
    root that an unsafe key would reach.
    """
    gen = torch.Generator().manual_seed(seed)
    n_all = n_train + 3 * n_clean
    clean = torch.randint(0, 14, (n_all,), generator=gen)
    flip = torch.rand(n_all, generator=gen) < 0.3
    noisy = torch.where(flip, torch.randint(0, 14, (n_all,), generator=gen), clean)
    keys = [_key(i) for i in range(n_all)]
    for i, key in enumerate(keys):
        _write_jpeg(root / key, int(clean[i]), i)
    train = list(range(n_train))
    clean_train = list(range(n_train, n_train + n_clean))
    val = list(range(n_train + n_clean, n_train + 2 * n_clean))
    test = list(range(n_train + 2 * n_clean, n_all))
    corrupt_train, missing_train, corrupt_test = train[20], train[21], test[0]
    (root / keys[corrupt_train]).write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (root / keys[corrupt_test]).write_bytes(b"garbage")
    (root / keys[missing_train]).unlink()
    _write_jpeg(root.parent / "outside.jpg", 0, 0)
    overlap = train[:12]

    def lines(items: list[str]) -> str:
        return "".join(f"{x}\n" for x in items)

    (root / "noisy_label_kv.txt").write_text(
        lines([f"{keys[i]} {int(noisy[i])}" for i in train] + [f"{k} 3" for k in UNSAFE])
    )
    (root / "clean_label_kv.txt").write_text(
        lines([f"{keys[i]} {int(clean[i])}" for i in overlap + clean_train + val + test])
    )
    (root / "noisy_train_key_list.txt").write_text(
        lines(
            [keys[i] for i in train[:10]] + UNSAFE[:1] + [keys[i] for i in train[10:]] + UNSAFE[1:]
        )
    )
    (root / "clean_train_key_list.txt").write_text(lines([keys[i] for i in clean_train]))
    (root / "clean_val_key_list.txt").write_text(lines([keys[i] for i in val]))
    (root / "clean_test_key_list.txt").write_text(lines([keys[i] for i in test]))
    (root / "category_names_eng.txt").write_text(lines(NAMES))
    return {
        "keys": keys,
        "train": train,
        "val": val,
        "test": test,
        "overlap": overlap,
        "clean": clean,
        "noisy": noisy,
        "bad_train": {corrupt_train, missing_train},
        "corrupt_test": corrupt_test,
    }


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """A ResNet-50 step on tiny images is dominated by thread start-up and contention on a busy
    machine; one intra-op thread keeps these tests fast and their timing stable."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def clothing(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("c1m") / "clothing1m"
    facts = make_clothing1m(root)
    return root, facts


def _module(root: Path, **kwargs) -> Clothing1MDataModule:
    kwargs = {"num_workers": 0, "batch_size": 8, "image_size": 32, "resize_size": 36, **kwargs}
    dm = Clothing1MDataModule(data_dir=str(root), **kwargs)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        dm.setup("fit")
    return dm


def test_reads_the_distribution_layout(clothing) -> None:
    root, facts = clothing
    dm = Clothing1MDataModule(data_dir=str(root), num_workers=0)
    with pytest.warns(UserWarning, match="outside the dataset root") as record:
        dm.setup("fit")
    texts = " ".join(str(w.message) for w in record)
    assert "noisy_train_key_list.txt" in texts and "'../outside.jpg'" in texts
    keys = [k.decode() for k in dm.data.train_images]
    assert keys == [facts["keys"][i] for i in facts["train"]]  # unsafe keys dropped, order kept
    assert torch.equal(dm.noisy_labels, facts["noisy"][facts["train"]])
    # the overlap of the two label files carries clean labels; the rest is unknown (-1)
    expected_clean = torch.full((len(keys),), -1)
    expected_clean[facts["overlap"]] = facts["clean"][facts["overlap"]]
    assert torch.equal(dm.data.train_clean, expected_clean)
    assert torch.equal(dm.data.test_labels, facts["clean"][facts["test"]])
    assert dm.transition is None and dm.class_names == NAMES
    info = dm.noise_info()
    assert info["type"] == "real" and info["clean_known"] == len(facts["overlap"])
    flipped = (facts["noisy"] != facts["clean"])[facts["overlap"]].float().mean().item()
    assert info["rate_actual"] == pytest.approx(flipped)
    # paper protocol: 10 % of the noisy training list is the (noisy) validation set
    assert len(dm.val_indices) == len(keys) // 10
    assert len(dm.train_indices) + len(dm.val_indices) == len(keys)
    assert dm.input_shape == (3, 224, 224)
    assert Clothing1MDataModule().num_workers == min(8, os.cpu_count() or 1)


def test_clean_val_protocol_validates_on_the_clean_list(clothing) -> None:
    root, facts = clothing
    dm = _module(root, protocol="clean_val", eval_batch_size=100)
    assert len(dm.val_indices) == 0 and len(dm.train_indices) == len(facts["train"])
    assert dm.clean_validation and not _module(root).clean_validation
    batch = next(iter(dm.val_dataloader()))
    assert torch.equal(batch["label"], facts["clean"][facts["val"]])
    assert torch.equal(batch["clean_label"], batch["label"])
    assert batch["image"].shape == (len(facts["val"]), 3, 32, 32)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_bad_images_are_skipped_counted_and_reported(clothing, num_workers: int) -> None:
    root, facts = clothing
    dm = _module(root, num_workers=num_workers, batch_size=5)
    seen: list[int] = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for batch in dm.train_dataloader():
            assert batch["image"].dtype == torch.uint8
            assert batch["image"].shape[1:] == (3, 32, 32)
            assert len(batch["label"]) == len(batch["image"]) == len(batch["index"]) > 0
            seen += batch["index"].tolist()
        skipped = dm.report_skipped("training epoch 0")
    train_positions = set(dm.train_indices.tolist())
    bad = {i for i in facts["bad_train"] if i in train_positions}
    assert bad, "the split should keep at least one bad image in training"
    assert sorted(seen) == sorted(train_positions - bad)
    assert skipped == len(bad) == dm.skipped_images
    assert any("were skipped during training epoch 0" in str(w.message) for w in record)
    if num_workers == 0:  # worker processes print their own per-image warnings
        assert any("skipping unreadable or corrupt image" in str(w.message) for w in record)
    assert dm.report_skipped("training epoch 1") == 0  # each skip is reported once


def test_train_crops_are_random_eval_crops_are_centered(clothing) -> None:
    root, _ = clothing
    dm = _module(root, image_size=24, resize_size=36)
    train_ds = dm.train_dataloader().dataset
    eval_ds = dm.test_dataloader().dataset
    crops = torch.stack([train_ds[1]["image"] for _ in range(6)])
    assert crops.shape == (6, 3, 24, 24) and crops.dtype == torch.uint8
    assert len({c.float().sum().item() for c in crops}) > 1
    assert torch.equal(eval_ds[1]["image"], eval_ds[1]["image"])
    # normalization and flip run batched on the device, no padded random crop there
    assert dm.transform.crop_padding == 0 and dm.transform.augment
    plain = _module(root, image_size=24, resize_size=36, augment=False)
    train_ds = plain.train_dataloader().dataset
    assert torch.equal(train_ds[1]["image"], train_ds[1]["image"])  # centered without augment
    assert not plain.transform.augment


def test_all_corrupt_training_batch_is_refilled(clothing) -> None:
    root, facts = clothing
    dm = _module(root)
    ds = dm.train_dataloader().dataset
    pos = [p for p, i in enumerate(dm.train_indices.tolist()) if i in facts["bad_train"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch = ds.__getitems__(pos)
    assert len(batch["image"]) == 1 and int(batch["index"][0]) not in facts["bad_train"]


def test_class_balanced_sampler_per_epoch_and_under_ddp() -> None:
    labels = torch.tensor([0] * 30 + [1] * 5 + [2] * 12)
    sampler = ClassBalancedSampler(labels, samples_per_class=8, seed=3)
    assert len(sampler) == 8 + 5 + 8
    first = list(sampler)
    assert len(first) == len(sampler) == len(set(first))
    counts = torch.bincount(labels[first], minlength=3).tolist()
    assert counts == [8, 5, 8]
    assert list(sampler) == first  # same epoch, same subsample
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first and torch.bincount(labels[second]).tolist() == [8, 5, 8]
    again = ClassBalancedSampler(labels, samples_per_class=8, seed=3)
    again.set_epoch(1)
    assert list(again) == second
    # Lightning's DDP wrapper forwards set_epoch and shards the epoch's subsample over ranks
    shards = []
    for rank in range(2):
        inner = ClassBalancedSampler(labels, samples_per_class=8, seed=3)
        wrapper = DistributedSamplerWrapper(inner, num_replicas=2, rank=rank, shuffle=False)
        wrapper.set_epoch(1)
        assert inner.epoch == 1
        shards.append(list(wrapper))
    # 21 samples over 2 ranks: 11 each, the padding repeats one sample
    assert len(shards[0]) == len(shards[1]) == 11
    assert set(shards[0]) | set(shards[1]) == set(second)
    assert len(set(shards[0]) & set(shards[1])) <= 1


def test_samples_per_class_drives_the_train_loader(clothing) -> None:
    root, _ = clothing
    dm = _module(root, samples_per_class=2, noise_seed=5)
    loader = dm.train_dataloader()
    assert isinstance(loader.sampler, ClassBalancedSampler)
    labels = dm.noisy_labels[dm.train_indices]
    expected = sum(min(2, int(n)) for n in torch.bincount(labels) if n > 0)
    assert len(loader.sampler) == expected
    assert dm.train_eval_dataloader().sampler.__class__.__name__ == "SequentialSampler"


def test_unsafe_keys() -> None:
    assert is_safe_key("images/0/00/1.jpg")
    for key in ["../x.jpg", "images/../../x.jpg", "/etc/passwd", "\\\\server\\x", "C:x.jpg", ""]:
        assert not is_safe_key(key), key
    assert not is_safe_key("images\\..\\..\\x.jpg")


def test_label_out_of_range_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "noisy_label_kv.txt"
    path.write_text("images/0/00/a.jpg 3\nimages/0/00/b.jpg 14\n")
    with pytest.raises(ValueError, match=r"line 2: label 14 is outside 0-13"):
        read_label_kv(path)
    path.write_text("images/0/00/a.jpg x\n")
    with pytest.raises(ValueError, match="line 1"):
        read_label_kv(path)


@pytest.mark.filterwarnings("ignore:.*point outside the dataset root")  # the fixture's own keys
def test_bad_label_line_fails_setup(clothing, tmp_path: Path) -> None:
    root, _ = clothing
    copy = tmp_path / "c1m"
    copy.mkdir()
    (copy / "images").symlink_to(root / "images")
    for name in ANNOTATION_FILES:
        (copy / name).write_bytes((root / name).read_bytes())
    with open(copy / "clean_label_kv.txt", "a") as fh:
        fh.write("images/9/99/000099.jpg -1\n")
    n_lines = len((copy / "clean_label_kv.txt").read_text().splitlines())
    dm = Clothing1MDataModule(data_dir=str(copy), num_workers=0)
    with pytest.raises(ValueError, match=rf"clean_label_kv.txt, line {n_lines}: label -1"):
        dm.setup("fit")


@pytest.mark.parametrize("missing", ["clean_test_key_list.txt", "images"])
def test_missing_annotation_file_is_named(clothing, tmp_path: Path, missing: str) -> None:
    root, _ = clothing
    copy = tmp_path / "c1m"
    copy.mkdir()
    if missing != "images":
        (copy / "images").symlink_to(root / "images")
    for name in ANNOTATION_FILES:
        if name != missing:
            (copy / name).write_bytes((root / name).read_bytes())
    dm = Clothing1MDataModule(data_dir=str(copy), num_workers=0)
    with pytest.raises(FileNotFoundError, match=missing) as exc:
        dm.setup("fit")
    assert "--data.data_dir" in str(exc.value)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"protocol": "clean"}, "protocol"),
        ({"samples_per_class": 0}, "samples_per_class"),
        ({"image_size": 64, "resize_size": 32}, "resize_size"),
    ],
)
def test_bad_options(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Clothing1MDataModule(**kwargs)


CLOTHING_PAIRS = pairs("clothing1m")
REAL_NOISE_ARGS = {"cdr": ("--model.clip_rate", "0.6"), "cdr_vrnl": ("--model.clip_rate", "0.6")}
"""What a pair without a Clothing1M preset needs on real noise, as docs/methods.md says (CDR's
``clip_rate: noise_rate`` needs a nominal rate: a number runs it)."""


def test_every_paper_method_runs_in_the_table2_sweep() -> None:
    """The Table 2 sweep runs CE, Forward, Reweight and VolMinNet and their VRNL variants, each
    on the Clothing1M data group."""
    from noisylabels.sweep.grid import load_sweep

    sweep = load_sweep(CONFIGS / "sweeps" / "table2_clothing1m.yaml")
    methods = {run.point["method"] for run in sweep.runs}
    for method in ("ce", "forward", "reweight", "volmin"):
        assert method in methods and (method == "ce" or f"{method}_vrnl" in methods)
    for run in sweep.runs:
        assert CONFIGS / "data" / "clothing1m.yaml" in run.configs, run.name


@pytest.mark.parametrize("pair", pair_params(CLOTHING_PAIRS))
def test_fast_dev_run_clothing1m_pair(
    pair: str, clothing, run_cli, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every Clothing1M pair (the data group with each method group, its preset where it has
    one) trains, validates and tests. The real ResNet-50 runs with CE; the other methods, which
    differ from it in the method only, and the tests below, which test the data, run with the
    tiny stand-in backbone."""
    if pair != "clothing1m_ce":
        request.getfixturevalue("tiny_backbones")
    root, _ = clothing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = run_cli(
            "fit",
            *config_args(pair),
            "--data.data_dir",
            str(root),
            "--model.network.pretrained",
            "false",
            "--trainer.fast_dev_run",
            "1",
            "--trainer.accelerator",
            "cpu",
            "--data.batch_size",
            "4",
            "--data.num_workers",
            "0",
            *SMALL,
            *REAL_NOISE_ARGS.get(pair.removeprefix("clothing1m_"), ()),
        )
    results = cli.results  # fast_dev_run: the results, but no results.json
    assert not list(tmp_path.rglob("results.json"))
    assert results["dataset"] == "clothing1m" and results["backbone"] == "resnet50"
    assert results["noise"]["type"] == "real" and results["noise"]["rate_nominal"] is None
    # the first test batch holds the corrupt test image: counted, in results.json too
    assert results["data"]["skipped_images"]["test"] == 1
    assert results["test_acc"] is not None and 0.0 <= results["test_acc"] <= 1.0


def test_cli_clean_val_and_subsampling_with_workers(
    clothing, run_cli, tmp_path: Path, tiny_backbones: None
) -> None:
    """The other protocol, per-epoch subsampling and worker processes through the real CLI; the
    corrupt images are skipped, not fatal."""
    root, _ = clothing
    with pytest.warns(UserWarning) as caught:
        cli = run_cli(
            "fit",
            *config_args("clothing1m_ce"),
            "--data.data_dir",
            str(root),
            "--model.network.pretrained",
            "false",
            "--trainer.fast_dev_run",
            "1",
            "--trainer.accelerator",
            "cpu",
            "--data.protocol",
            "clean_val",
            "--data.samples_per_class",
            "3",
            "--data.batch_size",
            "8",
            "--data.num_workers",
            "2",
            *SMALL,
        )
    warned = " | ".join(str(w.message) for w in caught)
    assert "skipped during test" in warned and "point outside the dataset root" in warned
    results = cli.results
    assert results["data"]["protocol"] == "clean_val"
    assert results["test_acc"] is not None
    assert isinstance(cli.datamodule.train_dataloader().sampler, ClassBalancedSampler)
    assert cli.datamodule.skipped_images >= 1  # the corrupt test image, counted in a worker


def test_subset_statistics_use_the_clean_noisy_overlap(
    clothing, run_cli, tiny_backbones: None
) -> None:
    """Training images listed in both label files are the ones split into mislabeled/correct."""
    root, facts = clothing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = run_cli(
            "fit",
            *config_args("clothing1m_ce"),
            "--data.data_dir",
            str(root),
            "--model.network.pretrained",
            "false",
            "--trainer.max_epochs",
            "1",
            "--trainer.accelerator",
            "cpu",
            "--trainer.callbacks+=noisylabels.callbacks.SubsetStatistics",
            "--checkpoint.save_top_k",
            "0",
            "--test_after_fit",
            "false",
            "--data.batch_size",
            "16",
            "--data.num_workers",
            "0",
            *SMALL,
        )
    stats = next(c for c in cli.trainer.callbacks if type(c).__name__ == "SubsetStatistics").last
    train = set(cli.datamodule.train_indices.tolist()) - facts["bad_train"]
    known = [i for i in facts["overlap"] if i in train]
    mislabeled = sum(int(facts["noisy"][i] != facts["clean"][i]) for i in known)
    assert 0 < mislabeled < len(known)
    assert stats["subsets/count/mislabeled"] == mislabeled
    assert stats["subsets/count/correct"] == len(known) - mislabeled
    assert stats["subsets/count/unknown"] == len(train) - len(known)
