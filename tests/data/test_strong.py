"""Strong views (``--data.strong_views``): AutoAugment's CIFAR-10 policy, batched on the device,
each operation the PIL operation of the reference; draws keyed by sample, epoch and view; the
options refused where they would change nothing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageEnhance, ImageOps

from noisylabels.data import CIFAR10DataModule, DigitsDataModule
from noisylabels.data.module import strong_views
from noisylabels.data.strong import (
    AUTOAUGMENT_CIFAR10,
    OPERATIONS,
    RANDAUGMENT_DISC,
    SampleRandom,
    _apply,
    autoaugment_cifar10,
    cutout,
    grey_cutout,
    magnitude,
    randaugment_disc,
    randaugment_value,
)
from noisylabels.errors import InputError

from conftest import make_image_folder

VALUES = {
    "Solarize": [256, 230, 128, 26],
    "Posterize2": [4, 3, 2, 1],
    "Rotate": [6, -6, 27, -30],
    "ShearY": [0.24, -0.21, 0.3, -0.03],
    "TranslateXAbs": [9, -9, 3, -1],
    "TranslateYAbs": [9, -3, 1, -8],
    "ShearX": [0.09, -0.01, 0.05, -0.1],
    "SolarizeAdd": [99, -99, 11, -44],
}
BLEND = [0.1, 0.64, 1.18, 1.9]


def _pil(op: str, img: Image.Image, v: float) -> Image.Image:
    """The reference's operation (shengliu66/SOP data_loader/augmentations.py) at value ``v``,
    the sign already drawn."""
    if op == "Invert":
        return ImageOps.invert(img)
    if op == "AutoContrast":
        return ImageOps.autocontrast(img)
    if op == "Equalize":
        return ImageOps.equalize(img)
    if op == "Solarize":
        return ImageOps.solarize(img, v)
    if op == "Posterize2":
        return ImageOps.posterize(img, int(v))
    if op in ("Contrast", "Color", "Brightness", "Sharpness"):
        return getattr(ImageEnhance, op)(img).enhance(v)
    if op == "Rotate":
        return img.rotate(v)
    if op == "SolarizeAdd":  # DISC datasets/randaugment.py:118-127, the sign already drawn
        added = np.clip(np.asarray(img).astype(np.int64) + int(v), 0, 255).astype(np.uint8)
        return ImageOps.solarize(Image.fromarray(added), 128)
    affine = {
        "ShearX": (1, v, 0, 0, 1, 0),
        "ShearY": (1, 0, 0, v, 1, 0),
        "TranslateXAbs": (1, 0, v, 0, 1, 0),
        "TranslateYAbs": (1, 0, 0, 0, 1, v),
    }
    return img.transform(img.size, Image.AFFINE, affine[op])


def _images(channels: int) -> np.ndarray:
    rng = np.random.default_rng(channels)
    imgs = rng.integers(0, 256, (6, 12, 16, channels), dtype=np.uint8)
    imgs[1] = imgs[1] // 3 + 60  # a narrow range (AutoContrast, Equalize)
    imgs[2] = 7  # one value (both leave it)
    imgs[3, :6] = 0  # a dark half
    imgs[4] = imgs[4] % 222 + 18  # 18..239: AutoContrast's scale where float rounding shows
    return imgs


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("op", OPERATIONS)
def test_every_operation_is_the_pil_operation_of_the_reference(op: str, channels: int) -> None:
    """Pixel for pixel, on colour and grey images, at several values and both signs."""
    imgs = _images(channels)
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float()
    n = len(x)
    for v in VALUES.get(op, BLEND):
        out = _apply(
            x,
            torch.full((n,), OPERATIONS.index(op)),
            torch.full((n,), float(v)),
            torch.ones(n, dtype=torch.bool),
        )
        for i, im in enumerate(imgs):
            pil_in = Image.fromarray(im[..., 0] if channels == 1 else im)
            ref = np.asarray(_pil(op, pil_in, v)).reshape(im.shape)
            mine = out[i].permute(1, 2, 0).numpy()
            assert np.array_equal(mine, ref.astype(np.float32)), (op, v, i)
        kept = _apply(x, torch.full((n,), OPERATIONS.index(op)), torch.full((n,), float(v)),
                      torch.zeros(n, dtype=torch.bool))  # fmt: skip
        assert torch.equal(kept, x)  # not applied: unchanged


@pytest.mark.parametrize("op", ["Rotate", "ShearY", "Sharpness", "AutoContrast"])
def test_geometric_and_filtered_operations_match_pil_at_imagenet_size(op: str) -> None:
    """224 x 224 (Clothing1M's crops): the 3 x 3 filter from integer sums and AutoContrast
    exactly; a rotation takes another nearest pixel than PIL at under 0.2 % of the pixels (PIL
    accumulates the coordinates along a row, step by step; exact at 28 and 32 pixels)."""
    rng = np.random.default_rng(1)
    imgs = rng.integers(18, 240, (2, 224, 224, 3), dtype=np.uint8)
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float()
    for v in VALUES.get(op, [0.1, 1.9]):
        out = _apply(x, torch.full((2,), OPERATIONS.index(op)), torch.full((2,), float(v)),
                     torch.ones(2, dtype=torch.bool))  # fmt: skip
        for i, im in enumerate(imgs):
            ref = np.asarray(_pil(op, Image.fromarray(im), v)).astype(np.float32)
            differ = (out[i].permute(1, 2, 0).numpy() != ref).any(-1).mean()
            assert differ <= (0.002 if op == "Rotate" else 0.0), (op, v, i, differ)


def test_the_policy_and_its_magnitudes_are_the_reference_s() -> None:
    """25 sub-policies of two operations; the reference's mapping of levels to values
    (augmentation_archive.py:10-26, :270-278)."""
    assert len(AUTOAUGMENT_CIFAR10) == 25
    assert all(len(sub) == 2 for sub in AUTOAUGMENT_CIFAR10)
    assert {name for sub in AUTOAUGMENT_CIFAR10 for name, _, _ in sub} == set(OPERATIONS) - {
        "ShearX",
        "SolarizeAdd",
    }
    assert AUTOAUGMENT_CIFAR10[0] == (("Invert", 0.1, 7), ("Contrast", 0.2, 6))
    assert AUTOAUGMENT_CIFAR10[-1] == (("TranslateYAbs", 0.7, 9), ("AutoContrast", 0.9, 1))
    assert magnitude("Solarize", 2) == 256 - 51
    assert magnitude("Posterize2", 7) == 2
    assert magnitude("Rotate", 2) == 6
    assert magnitude("ShearY", 8) == pytest.approx(0.24)
    assert magnitude("Contrast", 6) == pytest.approx(1.18)
    assert magnitude("TranslateXAbs", 9) == 9


def test_draws_are_keyed_by_sample_epoch_and_view_not_by_batch() -> None:
    """A sample's strong view is the same in any batch, order or process split; another
    epoch, view or seed draws anew."""
    torch.manual_seed(0)
    images = torch.randint(0, 256, (64, 3, 16, 16), dtype=torch.uint8)
    index = torch.arange(100, 164)
    whole = autoaugment_cifar10(images, SampleRandom(index, 7, 3, 0))
    order = torch.randperm(64)
    half = order[:32]
    part = autoaugment_cifar10(images[half], SampleRandom(index[half], 7, 3, 0))
    assert torch.equal(part, whole[half])
    for key in ((8, 3, 0), (7, 4, 0), (7, 3, 1)):
        other = autoaugment_cifar10(images, SampleRandom(index, *key))
        assert (other != whole).flatten(1).any(1).sum() > 20, key
    u = SampleRandom(torch.arange(50_000), 0, 0, 0).uniform(0)
    assert abs(float(u.mean()) - 0.5) < 0.01 and float(u.min()) >= 0 and float(u.max()) < 1


def test_each_image_draws_a_sub_policy_and_applies_its_operations_at_their_rates(
    monkeypatch,
) -> None:
    """Over many images, each of the 25 sub-policies is drawn about equally often, and each
    stage's operation is applied at its probability (the draws, recorded at every stage)."""
    import noisylabels.data.strong as strong

    seen = []
    original = strong._apply

    def record(x, op, value, applied):
        seen.append((op.clone(), applied.clone()))
        return original(x, op, value, applied)

    monkeypatch.setattr(strong, "_apply", record)
    n = 25_000
    images = torch.randint(0, 256, (n, 3, 4, 4), dtype=torch.uint8)
    strong.autoaugment_cifar10(images, SampleRandom(torch.arange(n), 0, 0, 0))
    assert len(seen) == 2
    first_ops = torch.tensor([OPERATIONS.index(a[0]) for a, _ in AUTOAUGMENT_CIFAR10])
    for stage, (_, applied) in enumerate(seen):
        expected = float(np.mean([sub[stage][1] for sub in AUTOAUGMENT_CIFAR10]))
        assert abs(float(applied.float().mean()) - expected) < 0.015, stage
    counts = torch.bincount(seen[0][0], minlength=len(OPERATIONS)).float() / n
    expected = torch.bincount(first_ops, minlength=len(OPERATIONS)).float() / 25
    assert (counts - expected).abs().max() < 0.015
    invert = seen[0][0] == OPERATIONS.index("Invert")  # sub-policy 0 only: p 0.1
    assert abs(float(seen[0][1][invert].float().mean()) - 0.1) < 0.03


def test_cutout_zeroes_one_clipped_square_per_image() -> None:
    x = torch.ones(200, 3, 32, 32)
    out = cutout(x, 16, SampleRandom(torch.arange(200), 0, 0, 0))
    zeros = (out == 0).all(1)  # (B, H, W): every channel of a cut pixel
    rows, cols = zeros.any(2), zeros.any(1)
    for b in range(200):
        assert int(zeros[b].sum()) == int(rows[b].sum()) * int(cols[b].sum())  # a rectangle
        assert 8 <= int(rows[b].sum()) <= 16 and 8 <= int(cols[b].sum()) <= 16
    assert (out[:, 0] == 0).sum() < 200 * 16 * 16 + 1
    assert torch.equal(cutout(x, 0, SampleRandom(torch.arange(200), 0, 0, 0)), x)


def test_disc_randaugment_values_are_the_reference_s() -> None:
    """The 16 operations of DISC's pool and its level-to-value rules (JackYFL/DISC
    datasets/randaugment.py:31-151, :184-203) at 32 and 224 pixels."""
    assert [name for name, _, _ in RANDAUGMENT_DISC] == [
        "AutoContrast", "Brightness", "Color", "Contrast", "Cutout", "Equalize", "Invert",
        "Posterize", "Rotate", "Sharpness", "ShearX", "ShearY", "Solarize", "SolarizeAdd",
        "TranslateX", "TranslateY",
    ]  # fmt: skip
    assert randaugment_value("Brightness", 4, 32, 32) == pytest.approx(4 * 1.8 / 10 + 0.1)
    assert randaugment_value("Posterize", 9, 32, 32) == 7  # int(3.6) + 4 bits kept
    assert randaugment_value("Posterize", 1, 32, 32) == 4
    assert randaugment_value("Rotate", 3, 32, 32) == 9
    assert randaugment_value("Solarize", 4, 32, 32) == 256 - 102
    assert randaugment_value("SolarizeAdd", 9, 32, 32) == 99
    assert randaugment_value("ShearX", 4, 32, 32) == pytest.approx(0.04)
    assert randaugment_value("TranslateX", 4, 32, 32) == 0  # int(0.02 * 32)
    assert randaugment_value("TranslateY", 9, 32, 32) == 1  # int(0.045 * 32)
    assert randaugment_value("TranslateX", 9, 224, 224) == 10
    assert randaugment_value("Cutout", 9, 32, 32) == 2  # int(0.09 * 32)
    assert randaugment_value("Cutout", 1, 32, 32) == 0  # a one-pixel square (inclusive)
    assert randaugment_value("Equalize", 5, 32, 32) == 0.0


def test_disc_rotations_are_pil_s_at_32_pixels() -> None:
    """Every angle DISC's Rotate takes (3 · level, both signs) is PIL's rotation pixel for
    pixel at 32 pixels, but ±12°, one pixel of 1024 off (the documented exception)."""
    rng = np.random.default_rng(4)
    imgs = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float()
    for degrees in [sign * 3 * level for level in range(1, 10) for sign in (1, -1)]:
        out = _apply(x, torch.full((3,), OPERATIONS.index("Rotate")),
                     torch.full((3,), float(degrees)), torch.ones(3, dtype=torch.bool))  # fmt: skip
        for i, im in enumerate(imgs):
            ref = np.asarray(Image.fromarray(im).rotate(degrees)).astype(np.float32)
            differ = int((out[i].permute(1, 2, 0).numpy() != ref).any(-1).sum())
            assert differ <= (1 if abs(degrees) == 12 else 0), (degrees, i, differ)


def _pil_grey_cutout(img: Image.Image, cx: float, cy: float, v: int) -> Image.Image:
    """The reference's CutoutAbs (randaugment.py:54-67) at a given centre."""
    w, h = img.size
    x0, y0 = int(max(0, cx - v / 2.0)), int(max(0, cy - v / 2.0))
    x1, y1 = int(min(w, x0 + v)), int(min(h, y0 + v))
    img = img.copy()
    fill = (127, 127, 127) if img.mode == "RGB" else 127
    ImageDraw.Draw(img).rectangle((x0, y0, x1, y1), fill)
    return img


@pytest.mark.parametrize("channels", [3, 1])
def test_grey_cutout_is_pil_s_inclusive_rectangle(channels: int) -> None:
    """At the centres its generator draws, pixel for pixel PIL's rectangle (both corners
    included), clipped at the borders, for sides 0 to 9."""
    imgs = _images(channels)
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float()
    n, h, w = len(x), x.shape[2], x.shape[3]
    index = torch.arange(n)
    for side in range(10):
        random = SampleRandom(index, 3, side, 0)
        out = grey_cutout(x, torch.full((n,), float(side)), random, 24)
        ux, uy = random.uniform(24) * w, random.uniform(25) * h
        for i, im in enumerate(imgs):
            pil_in = Image.fromarray(im[..., 0] if channels == 1 else im)
            ref = np.asarray(_pil_grey_cutout(pil_in, float(ux[i]), float(uy[i]), side))
            assert np.array_equal(out[i].permute(1, 2, 0).numpy(), ref.reshape(im.shape)), side


def test_disc_randaugment_draws_its_operations_levels_and_rates(monkeypatch) -> None:
    """Over many images: each stage draws each of the 16 operations about equally often, at
    levels uniform over 1 to m - 1, applied half the time; the last grey square always is
    (int(0.15 * 32) = 4: a 5 x 5 square inside the image)."""
    import noisylabels.data.strong as strong

    seen = []
    original = strong._apply

    def record(x, op, value, applied):
        seen.append((op.clone(), value.clone(), applied.clone()))
        return original(x, op, value, applied)

    monkeypatch.setattr(strong, "_apply", record)
    n = 32_000
    images = torch.full((n, 3, 32, 32), 40, dtype=torch.uint8)
    out = strong.randaugment_disc(images, SampleRandom(torch.arange(n), 0, 0, 0), 10)
    assert len(seen) == 2
    for op, value, applied in seen:
        counts = torch.bincount(torch.where(op < 0, len(OPERATIONS), op)).float() / n
        assert abs(float(applied.float().mean()) - 0.5 * 15 / 16) < 0.015  # Cutout apart
        assert abs(float(counts[OPERATIONS.index("Rotate")]) - 1 / 16) < 0.006
        rotate = op == OPERATIONS.index("Rotate")
        degrees = value[rotate].abs()
        assert set(degrees.unique().tolist()) == {3.0 * level for level in range(1, 10)}
        assert abs(float((value[rotate] < 0).float().mean()) - 0.5) < 0.05
    grey = (out * 255).round() == 127
    assert int(grey.all(1).flatten(1).sum(1).min()) >= 9  # the last square, at least 3 x 3


def test_disc_randaugment_acts_on_the_crop_and_flip(cifar10_dir: Path) -> None:
    """DISC's policies come after the dataset's crop and flip, before the normalization."""
    dm = _cifar(cifar10_dir, strong_views=1, strong_augment="randaugment-disc-m5")
    raw = next(iter(dm.train_dataloader()))
    torch.manual_seed(5)
    batch = dm.on_after_batch_transfer(dict(raw), 0)
    torch.manual_seed(5)
    dm.transform(raw["image"], train=True)  # the weak view's draws come first
    cropped = dm.transform.augmented(raw["image"])
    random = SampleRandom(raw["index"], torch.initial_seed(), 2, 0)
    expected = dm.transform.normalize(randaugment_disc(cropped, random, 5))
    assert torch.equal(batch["strong"][0], expected)


def _cifar(cifar10_dir: Path, **kwargs) -> CIFAR10DataModule:
    dm = CIFAR10DataModule(data_dir=str(cifar10_dir), batch_size=16, **kwargs)
    dm.setup("fit")
    dm.trainer = SimpleNamespace(training=True, current_epoch=2)
    return dm


def test_a_training_batch_holds_the_strong_views(cifar10_dir: Path) -> None:
    """``"strong"`` is ``(S, B, C, H, W)``: the policy, then crop, flip and normalization,
    then Cutout; the weak image is the batch of before; evaluation batches have none."""
    dm = _cifar(cifar10_dir, strong_views=2, cutout=16)
    raw = next(iter(dm.train_dataloader()))
    torch.manual_seed(3)
    batch = dm.on_after_batch_transfer(dict(raw), 0)
    strong = batch["strong"]
    assert strong.shape == (2, *raw["image"].shape)
    torch.manual_seed(3)
    assert torch.equal(batch["image"], dm.transform(raw["image"], train=True))  # as before
    expected = strong_views(raw["image"], raw["index"], dm.transform, 2, "autoaugment-cifar10",
                            16, epoch=2)  # fmt: skip
    assert torch.equal(strong, expected)
    assert (strong == 0).all(2).flatten(2).sum(2).min() >= 64  # a square of at least 8 x 8
    assert (strong[0] != strong[1]).flatten(1).any(1).all()  # two draws
    dm.trainer = SimpleNamespace(training=False, current_epoch=2)
    assert "strong" not in dm.on_after_batch_transfer(dict(raw), 0)


def test_file_backed_data_crops_every_strong_view_itself(tmp_path: Path) -> None:
    """An image folder's workers crop the weak and the strong views apart; the strong ones get
    the policy on the device."""
    from noisylabels.data import ImageFolderDataModule

    root = make_image_folder(tmp_path / "folder", {"train": 6, "test": 2})
    dm = ImageFolderDataModule(data_dir=str(root), batch_size=8, image_size=16, resize_size=20,
                               num_workers=0, augment=True, strong_views=1, views=2,
                               noise_rate=0.0, use_val_folder=False)  # fmt: skip
    dm.setup("fit")
    dm.trainer = SimpleNamespace(training=True, current_epoch=0)
    raw = next(iter(dm.train_dataloader()))
    assert raw["image"].shape[1:3] == (3, 3)  # two weak crops and a strong one per image
    batch = dm.on_after_batch_transfer(dict(raw), 0)
    assert batch["views"].shape == (2, len(raw["index"]), 3, 16, 16)
    assert batch["strong"].shape == (1, len(raw["index"]), 3, 16, 16)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"strong_augment": "autoaugment-cifar10"}, r"--data\.strong_augment .* no effect"),
        ({"cutout": 16}, r"--data\.cutout 16 would have no effect"),
        ({"strong_views": -1}, r"--data\.strong_views must be an integer >= 0"),
        ({"strong_views": 1, "strong_augment": "randaug"}, r"--data\.strong_augment must be one"),
        ({"strong_views": 1, "cutout": -2}, r"--data\.cutout must be an even number"),
        ({"strong_views": 1, "cutout": 15}, r"--data\.cutout must be an even number"),
        ({"strong_views": None}, r"--data\.strong_views must be an integer >= 0"),
        ({"strong_views": float("nan")}, r"--data\.strong_views must be an integer >= 0"),
    ],
)
def test_bad_or_inert_strong_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        DigitsDataModule(**options)


def test_the_cli_refuses_strong_views_a_method_does_not_use(tmp_path: Path) -> None:
    """Through the command line, exit 2 and one paragraph naming the option."""
    from as_command import run_command

    from conftest import CONFIGS

    result = run_command(["fit", "--config", str(CONFIGS / "data" / "digits.yaml"),
                  "--data.strong_views", "1", "--trainer.max_epochs", "1",
                  "--trainer.default_root_dir", str(tmp_path)])  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--data.strong_views 1 would have no effect" in result.stderr
    assert "Traceback" not in result.stderr
