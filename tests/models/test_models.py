"""Tests for noisylabels.models backbones (CPU, fast)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision.models import resnet50 as tv_resnet50

from noisylabels.models import BACKBONES, MLP, LeNet5, build_backbone
from noisylabels.models.resnet_cifar import resnet18, resnet32, resnet34
from noisylabels.models.resnet_imagenet import resnet50


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_lenet5_param_count_and_shape() -> None:
    model = LeNet5()
    assert n_params(model) == 61_706
    assert model(torch.randn(4, 1, 28, 28)).shape == (4, 10)


@pytest.mark.parametrize("factory", [resnet18, resnet34, resnet32])
def test_cifar_resnets_shapes_and_channels_last(factory) -> None:
    model = factory(num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = model(x)
        assert out.shape == (2, 10)
        model_cl = model.to(memory_format=torch.channels_last)
        out_cl = model_cl(x.to(memory_format=torch.channels_last))
    assert out_cl.shape == (2, 10)
    torch.testing.assert_close(out, out_cl, rtol=1e-4, atol=1e-4)


def test_cifar_resnet_in_channels() -> None:
    model = resnet32(num_classes=5, in_channels=1)
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 5)


def test_resnet32_param_count() -> None:
    assert 450_000 <= n_params(resnet32(num_classes=10)) <= 480_000


def test_resnet18_cifar_stem() -> None:
    model = resnet18(num_classes=10)
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    assert model.conv1.kernel_size == (3, 3)
    assert model.conv1.stride == (1, 1)


def test_mlp_digits() -> None:
    model = MLP(input_dim=64, num_classes=10, hidden=(32, 16), dropout=0.1)
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    built = build_backbone("mlp", num_classes=10, input_shape=(1, 8, 8))
    assert built(torch.randn(3, 1, 8, 8)).shape == (3, 10)


def test_build_backbone_registry() -> None:
    assert set(BACKBONES) == {
        "lenet5", "mlp", "resnet18", "resnet32", "resnet34", "resnet50", "vgg19_bn"
    }  # fmt: skip
    lenet = build_backbone("lenet5", num_classes=7, input_shape=(1, 28, 28))
    assert lenet(torch.randn(2, 1, 28, 28)).shape == (2, 7)
    r32 = build_backbone("resnet32", num_classes=100, input_shape=(3, 32, 32))
    assert r32(torch.randn(2, 3, 32, 32)).shape == (2, 100)


def test_build_backbone_unknown_name() -> None:
    with pytest.raises(ValueError) as excinfo:
        build_backbone("vgg16", num_classes=10, input_shape=(3, 32, 32))
    msg = str(excinfo.value)
    assert "vgg16" in msg
    for name in BACKBONES:
        assert name in msg


def test_vgg19_bn_on_animal10n_images() -> None:
    """torchvision's VGG-19-BN (ANIMAL-10N's network): 16 convolutions with batch norm, 64 px
    images pooled to 7x7 for the 4096-4096 head, a fresh 10-way output; too small an input or
    one channel is refused."""
    model = build_backbone("vgg19_bn", num_classes=10, input_shape=(3, 64, 64)).eval()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(convs) == len(norms) == 16 and model.classifier[-1].out_features == 10
    with torch.no_grad():
        assert model(torch.randn(2, 3, 64, 64)).shape == (2, 10)
    for shape in ((1, 64, 64), (3, 16, 16)):
        with pytest.raises(ValueError, match="vgg19_bn expects 3 input channels"):
            build_backbone("vgg19_bn", num_classes=10, input_shape=shape)


def test_resnet50_from_scratch() -> None:
    model = build_backbone("resnet50", num_classes=14, input_shape=(3, 64, 64)).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64)).shape == (1, 14)


def test_resnet50_pretrained_missing_weights(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path / "hub"))

    def no_download(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_download)
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_download)
    with pytest.raises(FileNotFoundError) as excinfo:
        resnet50(num_classes=14, pretrained=True)
    msg = str(excinfo.value)
    assert "--model.network.pretrained false" in msg
    assert "--model.network.weights_path" in msg
    assert str(tmp_path / "hub" / "checkpoints" / "resnet50-0676ba61.pth") in msg


def test_resnet50_weights_path(tmp_path) -> None:
    reference = tv_resnet50(weights=None)
    path = tmp_path / "resnet50.pth"
    torch.save(reference.state_dict(), path)
    model = build_backbone(
        "resnet50", num_classes=14, input_shape=(3, 64, 64), pretrained=True, weights_path=str(path)
    )
    torch.testing.assert_close(model.conv1.weight, reference.conv1.weight)
    torch.testing.assert_close(model.layer4[2].conv3.weight, reference.layer4[2].conv3.weight)
    assert model.fc.out_features == 14
    model.eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64)).shape == (1, 14)


def test_resnet50_weights_path_missing(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        resnet50(num_classes=3, pretrained=True, weights_path=str(tmp_path / "nope.pth"))


@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 8, 8), (1, 224, 224)])
def test_lenet5_on_images_it_is_not_sized_for_is_refused(shape: tuple[int, int, int]) -> None:
    """Its first linear layer takes 16x5x5 features, those of a 28x28 image: any other size
    failed at the first batch with a shape error; now before training, naming the backbones."""
    from noisylabels.errors import InputError

    with pytest.raises(InputError, match="lenet5 is LeNet-5 for 28x28 images"):
        build_backbone("lenet5", 10, shape)
