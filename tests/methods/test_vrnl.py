"""The VRNL objective: value, per-sample gradient weights, and the CE/Forward losses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from noisylabels.methods import CE, Forward, vrnl_objective


@pytest.mark.parametrize("alpha", [-0.1, 0.0, 0.05, 0.3])
def test_objective_equals_formula(alpha: float) -> None:
    losses = torch.rand(37, dtype=torch.float64) * 3
    out = vrnl_objective(losses, alpha, scope="local")
    var = ((losses - losses.mean()) ** 2).mean()  # population variance, 1/n
    assert torch.allclose(out.objective, losses.mean() - alpha * var)
    assert torch.allclose(out.variance, var)
    assert torch.allclose(out.weights, 1 + 2 * alpha * (losses.mean() - losses))


@pytest.mark.parametrize("alpha", [-0.2, 0.1])
def test_gradient_is_weighted_sum_of_per_sample_gradients(alpha: float) -> None:
    """∂R/∂θ = (1/n) Σ w_i ∂l_i/∂θ with w_i = 1 + 2α(mean(l) − l_i)."""
    torch.manual_seed(0)
    x = torch.randn(16, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (16,))
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    losses = F.cross_entropy(x @ w, y, reduction="none")
    out = vrnl_objective(losses, alpha, scope="local")
    (grad,) = torch.autograd.grad(out.objective, w, retain_graph=True)

    per_sample = torch.stack(
        [torch.autograd.grad(losses[i], w, retain_graph=True)[0] for i in range(len(losses))]
    )
    expected = (out.weights.view(-1, 1, 1) * per_sample).mean(0)
    assert torch.allclose(grad, expected, atol=1e-12)
    assert not torch.allclose(grad, per_sample.mean(0))  # the variance term does something


@pytest.mark.parametrize("alpha", [-0.4, 0.6])
def test_bounded_form_floors_the_weights_and_keeps_the_value(alpha: float) -> None:
    """The bounded form: the paper's value, and the gradient (1/n) sum max(w_i, 0) dl_i; some
    weights are floored here (the check can fail), none is negative."""
    torch.manual_seed(1)
    x = torch.randn(24, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (24,))
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    losses = F.cross_entropy(x @ w, y, reduction="none")
    paper = vrnl_objective(losses, alpha, scope="local")
    out = vrnl_objective(losses, alpha, scope="local", form="bounded")
    torch.testing.assert_close(out.objective, paper.objective)
    assert (paper.weights < 0).any() and (out.weights >= 0).all()
    torch.testing.assert_close(out.weights, paper.weights.clamp_min(0))
    (grad,) = torch.autograd.grad(out.objective, w, retain_graph=True)
    per_sample = torch.stack(
        [torch.autograd.grad(losses[i], w, retain_graph=True)[0] for i in range(len(losses))]
    )
    torch.testing.assert_close(grad, (out.weights.view(-1, 1, 1) * per_sample).mean(0))
    (paper_grad,) = torch.autograd.grad(paper.objective, w, retain_graph=True)
    assert not torch.allclose(grad, paper_grad)


def test_bounded_form_with_a_mask_and_a_variance_graph() -> None:
    """Masked samples get weight 0 and no gradient; with ``variance_losses`` (another graph of
    the same values) the weight-1 part reaches ``losses``' parameters and the floored weights'
    correction only ``variance_losses``', as in the paper's form."""
    a = torch.tensor([0.1, 0.5, 2.0, 4.0, 0.3], dtype=torch.float64, requires_grad=True)
    b = a.detach().clone().requires_grad_(True)
    mask = torch.tensor([True, True, True, True, False])
    out = vrnl_objective(a, 0.5, "local", variance_losses=b, mask=mask, form="bounded")
    out.objective.backward()
    kept = a.detach()[:4]
    weights = (1 + 2 * 0.5 * (kept.mean() - kept)).clamp_min(0)
    assert weights[3] == 0 and out.weights[4] == 0
    torch.testing.assert_close(out.weights[:4], weights)
    torch.testing.assert_close(a.grad, torch.tensor([0.25, 0.25, 0.25, 0.25, 0.0], dtype=a.dtype))
    torch.testing.assert_close(b.grad[:4], (weights - 1) / 4)
    assert b.grad[4] == 0


def test_bounded_form_is_the_paper_form_where_every_weight_is_positive() -> None:
    losses = (torch.rand(20, dtype=torch.float64) + 1).requires_grad_(True)
    (g_paper,) = torch.autograd.grad(vrnl_objective(losses, 0.05, "local").objective, losses)
    bounded = vrnl_objective(losses, 0.05, "local", form="bounded")
    (g_bounded,) = torch.autograd.grad(bounded.objective, losses)
    torch.testing.assert_close(g_bounded, g_paper)
    with pytest.raises(ValueError, match="form"):
        vrnl_objective(losses, 0.1, form="floored")


def test_alpha_zero_is_plain_mean_and_scopes_agree_without_ddp() -> None:
    losses = torch.rand(10)
    assert torch.allclose(vrnl_objective(losses, 0.0).objective, losses.mean())
    a = vrnl_objective(losses, 0.2, scope="global").objective
    b = vrnl_objective(losses, 0.2, scope="local").objective
    assert torch.allclose(a, b)


def test_bad_scope_and_shape() -> None:
    with pytest.raises(ValueError, match="scope"):
        vrnl_objective(torch.rand(3), 0.1, scope="world")
    with pytest.raises(ValueError, match="per-sample"):
        vrnl_objective(torch.rand(3, 2), 0.1)


def test_forward_loss_against_hand_computation() -> None:
    model = Forward(
        network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 1, 2), transition=True
    )
    T = torch.tensor([[0.8, 0.2, 0.0], [0.1, 0.7, 0.2], [0.0, 0.3, 0.7]])
    model.T.copy_(T)
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]])
    labels = torch.tensor([1, 2])
    p = torch.softmax(logits, 1)
    # q_j = Σ_i p_i T[i, j]
    q1 = p[0, 0] * 0.2 + p[0, 1] * 0.7 + p[0, 2] * 0.3
    q2 = p[1, 0] * 0.0 + p[1, 1] * 0.2 + p[1, 2] * 0.7
    expected = -torch.log(torch.stack([q1, q2]))
    got = model.per_sample_loss(logits, {"label": labels})
    assert torch.allclose(got, expected, atol=1e-6)
    # with T = I, Forward is cross-entropy
    model.T.copy_(torch.eye(3))
    ce = CE(network={"backbone": "mlp"}, num_classes=3, input_shape=(1, 1, 2))
    assert torch.allclose(
        model.per_sample_loss(logits, {"label": labels}),
        ce.per_sample_loss(logits, {"label": labels}),
        atol=1e-6,
    )


def test_large_alpha_warns_with_fraction(run_cli, tmp_path) -> None:
    from conftest import CONFIGS

    with pytest.warns(UserWarning, match=r"non-positive VRNL weight"):
        run_cli(
            "fit",
            "--config",
            str(CONFIGS / "quickstart.yaml"),
            "--model.alpha",
            "5.0",
            "--trainer.max_epochs",
            "1",
        )
    from conftest import read_results

    assert read_results(tmp_path)["alpha"] == 5.0


def test_bad_model_arguments() -> None:
    with pytest.raises(ValueError, match="variance_scope"):
        CE(variance_scope="everywhere")
    with pytest.raises(ValueError, match="--model.vrnl_form must be one of"):
        CE(alpha=0.1, vrnl_form="clipped")
    with pytest.raises(ValueError, match="--model.optim.optimizer must be one of"):
        CE(optim={"optimizer": "lbfgs"})
    with pytest.raises(ValueError, match="unknown backbone|available"):
        CE(network={"backbone": "vgg99"})
    with pytest.raises(FileNotFoundError, match="transition file"):
        Forward(transition="/no/such/T.csv")
    with pytest.raises(ValueError, match="resnet50 only"):
        CE(network={"backbone": "lenet5", "pretrained": True})
