"""Strong augmentation, batched on the device: the AutoAugment policy of CIFAR-10, DISC's
RandAugment and Cutout.

Methods that compare a weakly and a strongly augmented view of every image (SOP+) train on
``--data.strong_views S``: every training batch then also holds ``"strong"``, ``(S, B, C, H, W)``,
each view an independent draw of

1. one of the 25 sub-policies of AutoAugment's CIFAR-10 policy (Cubuk et al., "AutoAugment:
   Learning Augmentation Policies from Data", CVPR 2019, Table 7), each of its two operations
   applied with its probability, with the magnitudes of the reference code SOP+ uses
   (shengliu66/SOP@4d991ce ``data_loader/augmentation_archive.py:41-69`` for the policy,
   ``:10-26`` and ``:270-278`` for the magnitudes, ``data_loader/augmentations.py:11-110`` for
   the operations: the geometric ones take a random sign, translations are in pixels);
2. the dataset's own training augmentation (crop and flip where ``--data.augment``), then the
   normalization;
3. Cutout (DeVries & Taylor 2017) of side ``--data.cutout`` (0: none) at a uniformly drawn
   centre, clipped at the borders, setting the normalized pixels to 0
   (``data_loader/augmentations.py:204-228``, applied after the normalization as in
   ``data_loader/data_loaders.py:56-57``).

The operations act on pixel values 0-255 and keep them integers, as on the reference's 8-bit PIL
images: the geometric ones sample the nearest pixel at the centre of every output pixel (PIL's
``NEAREST``) with black outside the image (a rotation of a 224-pixel image takes another pixel
than PIL's step-by-step coordinates at about 0.1 % of its pixels; at 28 and 32 pixels exact
for every angle of both policies but DISC's ±12°, one pixel of 1024 off at 32);
AutoContrast, Equalize and the blends (Contrast, Color, Brightness, Sharpness) follow PIL's
``ImageOps`` and ``ImageEnhance`` definitions. Every image draws its sub-policy, its
probabilities, its signs and its Cutout independently, with ``torch.where`` over the batch: no
host synchronization, no loop over images. The policy's and Cutout's draws are those of a
counter-based generator (:class:`SampleRandom`) keyed by the run's seed, the epoch, the view and
the sample's dataset index, not by a position in a random stream: they are the same for a sample
whatever the batch it is in, the number of processes (DDP) or a resume. The crop and flip of
step 2 are drawn as the weak views' are (independently of them, from the device's random state).

On CIFAR-100 the reference normalizes its strong view with CIFAR-10's statistics
(``data_loaders.py:97-102``, its weak view with CIFAR-100's); here both views use the dataset's.

DISC's RandAugment (``randaugment-disc-m5``, ``randaugment-disc-m10``: :func:`randaugment_disc`,
JackYFL/DISC@a21e910 ``datasets/randaugment.py:184-258``) draws two of its 16 operations per
image at levels 1 to m - 1, each applied with probability 0.5, then a grey square of 15 % of the
width; it acts on the dataset's crop and flip of the image (:data:`AFTER_CROP`), as DISC's
transforms do, so its order is step 2, then the policy, then the normalization and Cutout.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

POLICIES = ("autoaugment-cifar10", "randaugment-disc-m5", "randaugment-disc-m10")
"""The strong augmentation policies ``--data.strong_augment`` accepts."""
AFTER_CROP = frozenset({"randaugment-disc-m5", "randaugment-disc-m10"})
"""The policies that act on the dataset's crop and flip of the image (the others act on the
image before them)."""

# (operation, probability, level 0-9): AutoAugment's CIFAR-10 policy as the SOP+ reference
# lists it (augmentation_archive.py:43-69).
AUTOAUGMENT_CIFAR10: tuple[tuple[tuple[str, float, int], tuple[str, float, int]], ...] = (
    (("Invert", 0.1, 7), ("Contrast", 0.2, 6)),
    (("Rotate", 0.7, 2), ("TranslateXAbs", 0.3, 9)),
    (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
    (("ShearY", 0.5, 8), ("TranslateYAbs", 0.7, 9)),
    (("AutoContrast", 0.5, 8), ("Equalize", 0.9, 2)),
    (("ShearY", 0.2, 7), ("Posterize2", 0.3, 7)),
    (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
    (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
    (("Equalize", 0.6, 5), ("Equalize", 0.5, 1)),
    (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
    (("Color", 0.7, 7), ("TranslateXAbs", 0.5, 8)),
    (("Equalize", 0.3, 7), ("AutoContrast", 0.4, 8)),
    (("TranslateYAbs", 0.4, 3), ("Sharpness", 0.2, 6)),
    (("Brightness", 0.9, 6), ("Color", 0.2, 6)),
    (("Solarize", 0.5, 2), ("Invert", 0.0, 3)),
    (("Equalize", 0.2, 0), ("AutoContrast", 0.6, 0)),
    (("Equalize", 0.2, 8), ("Equalize", 0.6, 4)),
    (("Color", 0.9, 9), ("Equalize", 0.6, 6)),
    (("AutoContrast", 0.8, 4), ("Solarize", 0.2, 8)),
    (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
    (("Solarize", 0.4, 5), ("AutoContrast", 0.9, 3)),
    (("TranslateYAbs", 0.9, 9), ("TranslateYAbs", 0.7, 9)),
    (("AutoContrast", 0.9, 2), ("Solarize", 0.8, 3)),
    (("Equalize", 0.8, 8), ("Invert", 0.1, 3)),
    (("TranslateYAbs", 0.7, 9), ("AutoContrast", 0.9, 1)),
)

OPERATIONS = (
    "Invert",
    "AutoContrast",
    "Equalize",
    "Solarize",
    "Posterize2",
    "Contrast",
    "Color",
    "Brightness",
    "Sharpness",
    "Rotate",
    "ShearY",
    "TranslateXAbs",
    "TranslateYAbs",
    "ShearX",
    "SolarizeAdd",
)
GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateXAbs", "TranslateYAbs")


def _signed(value: int) -> int:
    """A 64-bit constant as the int64 of the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)


def _shift_right(x: Tensor, bits: int) -> Tensor:
    """Logical right shift of int64 values (``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x: Tensor) -> Tensor:
    """SplitMix64's finalizer (Steele, Lea & Flood 2014) on int64 tensors (wrapping)."""
    z = x + _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    return z ^ _shift_right(z, 31)


class SampleRandom:
    """Random numbers keyed by ``(seed, epoch, view, sample index, stream)``: the same for a
    sample wherever it is drawn (a counter-based generator: SplitMix64's finalizer over the
    key), on the samples' device, without host synchronization.

    Args:
        index: dataset indices of the batch's samples, ``(B,)``.
        seed, epoch, view: the rest of the key.
    """

    def __init__(self, index: Tensor, seed: int, epoch: int, view: int) -> None:
        key = torch.tensor(0, dtype=torch.int64)  # on the host: no device synchronization
        for part in (seed, epoch, view):
            key = _mix(key + _signed(int(part) % (1 << 64)))
        self.keys = _mix(index.long() * _GOLDEN + int(key))

    def uniform(self, stream: int) -> Tensor:
        """``(B,)`` floats in [0, 1), 24 random bits each, for draw number ``stream``."""
        bits = _shift_right(_mix(self.keys + _signed((stream * _MIX1) % (1 << 64))), 40)
        return bits.to(torch.float32) / float(1 << 24)

    def integers(self, stream: int, high: int) -> Tensor:
        """``(B,)`` integers in ``[0, high)``."""
        return (self.uniform(stream) * high).long().clamp(max=high - 1)


def magnitude(operation: str, level: int) -> float:
    """The value an operation applies at a policy ``level`` (0-9): the reference's mapping
    (``augmentation_archive.py:10-26``, ``float_parameter(l, m) = l m / 10`` and
    ``int_parameter`` its integer part, ``:270-278``). Translations are pixels (the level
    itself); Invert, AutoContrast and Equalize have none."""

    def float_parameter(maxval: float) -> float:
        return level * maxval / 10

    def int_parameter(maxval: float) -> int:
        return int(float_parameter(maxval))

    if operation == "ShearY":
        return float_parameter(0.3)
    if operation == "Rotate":
        return float(int_parameter(30))
    if operation == "Solarize":
        return float(256 - int_parameter(256))
    if operation == "Posterize2":
        return float(4 - int_parameter(4))  # bits kept
    if operation in ("Contrast", "Color", "Brightness", "Sharpness"):
        return float_parameter(1.8) + 0.1
    if operation in ("TranslateXAbs", "TranslateYAbs"):
        return float(level)
    return 0.0


@functools.cache
def _policy_tables(device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """``(25, 2)`` operation indices (into :data:`OPERATIONS`), probabilities and magnitudes,
    made once per device (a copy to a GPU per batch would synchronize with the host)."""
    ops = [[OPERATIONS.index(name) for name, _, _ in sub] for sub in AUTOAUGMENT_CIFAR10]
    probs = [[p for _, p, _ in sub] for sub in AUTOAUGMENT_CIFAR10]
    mags = [[magnitude(name, level) for name, _, level in sub] for sub in AUTOAUGMENT_CIFAR10]
    return (
        torch.tensor(ops, device=device),
        torch.tensor(probs, device=device),
        torch.tensor(mags, device=device, dtype=torch.float32),
    )


def _per_image(values: Tensor, x: Tensor) -> Tensor:
    return values.view(-1, *([1] * (x.ndim - 1)))


def _blend(degenerate: Tensor, x: Tensor, factor: Tensor) -> Tensor:
    """PIL's ``Image.blend(degenerate, x, factor)`` on 8-bit values, ``factor`` per image."""
    out = degenerate + _per_image(factor, x) * (x - degenerate)
    return out.floor().clamp(0.0, 255.0)


def _luminance(x: Tensor) -> Tensor:
    """PIL's ``convert("L")``: ``(B, 1, H, W)``; a one-channel image is its own."""
    if x.shape[1] == 1:
        return x
    r, g, b = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    return torch.floor((r * 19595 + g * 38470 + b * 7471 + 32768) / 65536)


def autocontrast(x: Tensor) -> Tensor:
    """Per image and channel, the lowest value to 0 and the highest to 255 (unchanged where
    they are equal); PIL's ``ImageOps.autocontrast`` without cutoff."""
    x64 = x.double()  # PIL's look-up table in double precision: i * scale + offset
    lo = x64.amin(dim=(2, 3), keepdim=True)
    hi = x64.amax(dim=(2, 3), keepdim=True)
    spread = hi - lo
    scale = torch.full_like(spread, 255.0) / spread.clamp_min(1.0)  # PIL's 255.0 / (hi - lo)
    scaled = (x64 * scale + (-lo * scale)).floor().clamp(0.0, 255.0).to(x.dtype)
    return torch.where(spread > 0, scaled, x)


def equalize(x: Tensor) -> Tensor:
    """Per image and channel, PIL's ``ImageOps.equalize``: the look-up table
    ``(step // 2 + pixels below v) // step`` with ``step = (pixels - pixels at the highest
    value) // 255``; unchanged where ``step`` is 0."""
    b, c, h, w = x.shape
    values = x.reshape(b * c, h * w).long().clamp(0, 255)
    hist = torch.zeros(b * c, 256, device=x.device, dtype=torch.long)
    hist.scatter_add_(1, values, torch.ones_like(values))
    top = values.amax(dim=1, keepdim=True)
    step = (h * w - hist.gather(1, top)) // 255
    below = hist.cumsum(1) - hist
    lut = ((step // 2 + below) // step.clamp_min(1)).clamp(max=255)
    out = lut.gather(1, values).to(x.dtype)
    out = torch.where(step > 0, out, values.to(x.dtype))
    return out.view(b, c, h, w)


def smooth(x: Tensor) -> Tensor:
    """PIL's ``ImageFilter.SMOOTH`` (3x3 kernel 1 1 1 / 1 5 1 / 1 1 1 over 13, rounded) inside
    the image, the border pixels unchanged."""
    h, w = x.shape[2:]
    if h < 3 or w < 3:
        return x.clone()  # no inside
    total = 4.0 * x[:, :, 1:-1, 1:-1]  # the centre's weight 5: once more in the 3x3 sum
    for dy in range(3):
        for dx in range(3):
            total = total + x[:, :, dy : h - 2 + dy, dx : w - 2 + dx]
    inner = torch.floor(total / 13.0 + 0.5).clamp(0.0, 255.0)  # integer sums: exact
    out = x.clone()
    out[:, :, 1:-1, 1:-1] = inner
    return out


def affine(x: Tensor, matrix: Tensor) -> Tensor:
    """PIL's ``Image.transform(size, AFFINE, matrix, NEAREST)`` per image: output pixel
    ``(col, row)`` takes the input pixel at ``floor(matrix @ (col + 0.5, row + 0.5, 1))``,
    black where that lies outside the image. ``matrix``: ``(B, 2, 3)``."""
    b, c, h, w = x.shape
    cols = torch.arange(w, device=x.device, dtype=torch.float64) + 0.5  # PIL's doubles
    rows = torch.arange(h, device=x.device, dtype=torch.float64) + 0.5
    gy, gx = torch.meshgrid(rows, cols, indexing="ij")
    m = matrix.double()
    xin = m[:, 0, 0, None, None] * gx + m[:, 0, 1, None, None] * gy + m[:, 0, 2, None, None]
    yin = m[:, 1, 0, None, None] * gx + m[:, 1, 1, None, None] * gy + m[:, 1, 2, None, None]
    xi, yi = torch.floor(xin).long(), torch.floor(yin).long()
    inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
    flat = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).view(b, 1, h * w).expand(b, c, h * w)
    out = x.reshape(b, c, h * w).gather(2, flat).view(b, c, h, w)
    return torch.where(inside.view(b, 1, h, w), out, torch.zeros_like(out))


def _geometric_matrix(op: Tensor, value: Tensor, h: int, w: int) -> Tensor:
    """``(B, 2, 3)`` input-from-output matrices of the geometric operations (the identity for
    the others): Rotate by ``value`` degrees about the centre (PIL's ``rotate``), ShearY
    ``y + value x``, ShearX ``x + value y``, translations by ``value`` pixels."""
    n = op.shape[0]
    m = torch.zeros(n, 2, 3, device=op.device, dtype=torch.float64)
    value = value.double()
    m[:, 0, 0] = 1.0
    m[:, 1, 1] = 1.0
    angle = -(value * (math.pi / 180.0))  # PIL: -math.radians(v), cos and sin to 15 places
    cos, sin = torch.cos(angle).round(decimals=15), torch.sin(angle).round(decimals=15)
    cx, cy = w / 2.0, h / 2.0
    rotate = op == OPERATIONS.index("Rotate")
    rot = torch.stack(
        [
            torch.stack([cos, sin, (cos * -cx + sin * -cy + 0.0) + cx], 1),
            torch.stack([-sin, cos, (-sin * -cx + cos * -cy + 0.0) + cy], 1),
        ],
        1,
    )
    m = torch.where(rotate.view(-1, 1, 1), rot, m)
    shear = op == OPERATIONS.index("ShearY")
    m[:, 1, 0] = torch.where(shear, value, m[:, 1, 0])
    shear_x = op == OPERATIONS.index("ShearX")
    m[:, 0, 1] = torch.where(shear_x, value, m[:, 0, 1])
    tx = op == OPERATIONS.index("TranslateXAbs")
    m[:, 0, 2] = torch.where(tx, value, m[:, 0, 2])
    ty = op == OPERATIONS.index("TranslateYAbs")
    m[:, 1, 2] = torch.where(ty, value, m[:, 1, 2])
    return m


def _is_geometric(op: Tensor) -> Tensor:
    """Where ``op`` (indices into :data:`OPERATIONS`, -1 for none) is a geometric operation."""
    out = torch.zeros_like(op, dtype=torch.bool)
    for name in GEOMETRIC:
        out |= op == OPERATIONS.index(name)
    return out


def _apply(x: Tensor, op: Tensor, value: Tensor, applied: Tensor) -> Tensor:
    """One stage of the sub-policies: image ``i`` gets operation ``op[i]`` at ``value[i]``
    where ``applied[i]``."""
    n, _, h, w = x.shape
    chosen = torch.where(applied, op, -1)

    def pick(name: str, result: Tensor, current: Tensor) -> Tensor:
        mask = (chosen == OPERATIONS.index(name)).view(-1, 1, 1, 1)
        return torch.where(mask, result, current)

    geometric = _is_geometric(chosen)
    matrix = _geometric_matrix(torch.where(geometric, chosen, -1), value, h, w)
    out = torch.where(geometric.view(-1, 1, 1, 1), affine(x, matrix), x)
    out = pick("Invert", 255.0 - x, out)
    out = pick("AutoContrast", autocontrast(x), out)
    out = pick("Equalize", equalize(x), out)
    out = pick("Solarize", torch.where(x >= _per_image(value, x), 255.0 - x, x), out)
    added = (x + _per_image(value, x)).clamp(0.0, 255.0)  # then solarized at 128
    out = pick("SolarizeAdd", torch.where(added >= 128.0, 255.0 - added, added), out)
    keep = torch.exp2(8.0 - _per_image(value, x))  # bits kept: values in steps of 2^(8-bits)
    out = pick("Posterize2", x - torch.remainder(x, keep), out)
    gray = _luminance(x)
    mean = torch.floor(gray.mean(dim=(1, 2, 3), keepdim=True) + 0.5).expand_as(x)
    out = pick("Contrast", _blend(mean, x, value), out)
    out = pick("Color", _blend(gray.expand_as(x), x, value), out)
    out = pick("Brightness", _blend(torch.zeros_like(x), x, value), out)
    out = pick("Sharpness", _blend(smooth(x), x, value), out)
    return out


def autoaugment_cifar10(images: Tensor, random: SampleRandom) -> Tensor:
    """One draw of AutoAugment's CIFAR-10 policy per image of ``images`` (``(B, C, H, W)``,
    uint8 or floats in [0, 1]), from ``random`` (streams 0-4); floats in [0, 1] out,
    multiples of 1/255 (module docstring)."""
    x = images.float() if images.dtype == torch.uint8 else (images.float() * 255.0).round()
    ops, probs, mags = _policy_tables(x.device)
    sub = random.integers(0, len(AUTOAUGMENT_CIFAR10))
    for stage in range(2):
        op, p, value = ops[sub, stage], probs[sub, stage], mags[sub, stage]
        applied = random.uniform(1 + 2 * stage) < p
        flip = _is_geometric(op) & (random.uniform(2 + 2 * stage) < 0.5)
        value = torch.where(flip, -value, value)
        x = _apply(x, op, value, applied)
    return x / 255.0


def cutout(images: Tensor, length: int, random: SampleRandom) -> Tensor:
    """Zero a ``length`` x ``length`` square (``length`` even) of every image at a uniformly
    drawn centre (from ``random``, streams 5-6), clipped at the borders (rows
    ``[y - length // 2, y + length // 2)``, likewise columns)."""
    if length <= 0:
        return images
    n, _, h, w = images.shape
    y = random.integers(5, h).view(n, 1)
    x = random.integers(6, w).view(n, 1)
    rows = torch.arange(h, device=images.device).view(1, h)
    cols = torch.arange(w, device=images.device).view(1, w)
    half = length // 2
    in_rows = (rows >= y - half) & (rows < y + half)
    in_cols = (cols >= x - half) & (cols < x + half)
    square = in_rows.view(n, 1, h, 1) & in_cols.view(n, 1, 1, w)
    return torch.where(square, torch.zeros_like(images), images)


# DISC's RandAugment (JackYFL/DISC@a21e910 datasets/randaugment.py:184-203, the pool of
# ``RandAugmentwogeo``, :242-258): (operation, max_v, bias) of each of its 16 operations, the
# names those of :data:`OPERATIONS` where one applies it ("Cutout" and the relative translations
# are sized from the image, below).
RANDAUGMENT_DISC: tuple[tuple[str, float | None, float | None], ...] = (
    ("AutoContrast", None, None),
    ("Brightness", 1.8, 0.1),
    ("Color", 1.8, 0.1),
    ("Contrast", 1.8, 0.1),
    ("Cutout", 0.1, 0.0),
    ("Equalize", None, None),
    ("Invert", None, None),
    ("Posterize", 4, 4),
    ("Rotate", 30, 0),
    ("Sharpness", 1.8, 0.1),
    ("ShearX", 0.1, 0.0),
    ("ShearY", 0.1, 0.0),
    ("Solarize", 256, 0),
    ("SolarizeAdd", 110, 0),
    ("TranslateX", 0.05, 0.0),
    ("TranslateY", 0.05, 0.0),
)
SIGNED = frozenset({"Rotate", "ShearX", "ShearY", "SolarizeAdd", "TranslateX", "TranslateY"})
"""The pool's operations that take a random sign (``randaugment.py:87-143``)."""
DISC_CUTOUT_FRACTION = 0.15
"""DISC's Cutout after the operations: a grey square of ``int(0.15 · width)`` pixels
(``randaugment.py:256-257``)."""


def randaugment_value(operation: str, level: int, height: int, width: int) -> float:
    """The value an operation of :data:`RANDAUGMENT_DISC` applies at ``level`` (1 to m - 1) on
    a ``height`` x ``width`` image, before its sign: the reference's ``_float_parameter(v,
    max_v) = v · max_v / 10`` (``_int_parameter`` its integer part) plus the bias, then its
    operation's own rule (``randaugment.py:31-151``): Solarize's threshold ``256 - v``,
    Posterize's bits kept, translations ``int(v · size)`` pixels, Cutout's side ``int(v ·
    min(size))`` pixels."""
    name, max_v, bias = next(row for row in RANDAUGMENT_DISC if row[0] == operation)
    if max_v is None:
        return 0.0
    as_float = float(level) * max_v / 10 + bias
    as_int = int(level * max_v / 10) + bias
    if name in ("Posterize", "Rotate", "SolarizeAdd"):
        return float(as_int)
    if name == "Solarize":
        return float(256 - as_int)
    if name == "TranslateX":
        return float(int(as_float * width))
    if name == "TranslateY":
        return float(int(as_float * height))
    if name == "Cutout":
        return float(int(as_float * min(height, width)))
    return as_float


_AS_OPERATION = {"Posterize": "Posterize2", "TranslateX": "TranslateXAbs",
                 "TranslateY": "TranslateYAbs"}  # fmt: skip
CUTOUT_OP = len(OPERATIONS)
"""The operation index of the pool's grey Cutout (applied apart from :func:`_apply`)."""


@functools.cache
def _randaugment_tables(device: torch.device, height: int, width: int) -> tuple[Tensor, ...]:
    """``(16,)`` operation indices and signedness and ``(16, 10)`` values by level (0-9) of
    :data:`RANDAUGMENT_DISC` for one image size, made once per device and size."""
    ops, signed, values = [], [], []
    for name, _, _ in RANDAUGMENT_DISC:
        ops.append(
            CUTOUT_OP if name == "Cutout" else OPERATIONS.index(_AS_OPERATION.get(name, name))
        )
        signed.append(name in SIGNED)
        values.append([randaugment_value(name, level, height, width) for level in range(10)])
    return (
        torch.tensor(ops, device=device),
        torch.tensor(signed, device=device),
        torch.tensor(values, device=device, dtype=torch.float32),
    )


def grey_cutout(x: Tensor, length: Tensor, random: SampleRandom, stream: int) -> Tensor:
    """The reference's ``CutoutAbs`` (``randaugment.py:54-67``) per image of 8-bit values:
    a centre ``(x, y)`` uniform over the image, the corner ``x0 = int(max(0, x - L / 2))``,
    ``x1 = int(min(W, x0 + L))`` (likewise rows), and the pixels from ``x0`` to ``x1``
    *inclusive* (PIL's ``rectangle``) set to 127 in every channel; ``length`` ``(B,)`` pixels,
    ``random`` streams ``stream`` and ``stream + 1``."""
    n, _, h, w = x.shape
    half = length.float() / 2.0
    x0 = (random.uniform(stream) * w - half).clamp_min(0.0).floor()
    y0 = (random.uniform(stream + 1) * h - half).clamp_min(0.0).floor()
    x1 = torch.minimum(x0 + length, torch.full_like(x0, float(w)))
    y1 = torch.minimum(y0 + length, torch.full_like(y0, float(h)))
    cols = torch.arange(w, device=x.device, dtype=torch.float32).view(1, w)
    rows = torch.arange(h, device=x.device, dtype=torch.float32).view(1, h)
    in_cols = (cols >= x0.view(n, 1)) & (cols <= x1.view(n, 1))
    in_rows = (rows >= y0.view(n, 1)) & (rows <= y1.view(n, 1))
    square = in_rows.view(n, 1, h, 1) & in_cols.view(n, 1, 1, w)
    return torch.where(square, torch.full_like(x, 127.0), x)


def randaugment_disc(images: Tensor, random: SampleRandom, m: int) -> Tensor:
    """DISC's RandAugment (``RandAugmentwogeo(n=2, m)``, ``randaugment.py:242-258``) per image
    of ``images`` (``(B, C, H, W)``, uint8 or floats in [0, 1]): twice, an operation of the
    16 of :data:`RANDAUGMENT_DISC` drawn uniformly (with replacement) at a level uniform over
    1 to ``m - 1``, applied with probability 0.5 (a signed one with a random sign); then the
    grey Cutout of ``int(0.15 · W)`` pixels. Draws from ``random`` streams 20-33; floats in
    [0, 1] out, multiples of 1/255."""
    x = images.float() if images.dtype == torch.uint8 else (images.float() * 255.0).round()
    n, _, h, w = x.shape
    ops, signed, values = _randaugment_tables(x.device, h, w)
    for stage in range(2):
        streams = 20 + 6 * stage  # pick, level, applied, sign, Cutout's centre (two)
        pick = random.integers(streams, len(RANDAUGMENT_DISC))
        level = 1 + random.integers(streams + 1, m - 1)
        applied = random.uniform(streams + 2) < 0.5
        negative = signed[pick] & (random.uniform(streams + 3) < 0.5)
        value = values[pick, level]
        value = torch.where(negative, -value, value)
        op = ops[pick]
        is_cutout = op == CUTOUT_OP
        x = _apply(x, torch.where(is_cutout, -1, op), value, applied & ~is_cutout)
        cut = grey_cutout(x, value, random, streams + 4)
        x = torch.where((applied & is_cutout).view(-1, 1, 1, 1), cut, x)
    length = torch.full((n,), float(int(w * DISC_CUTOUT_FRACTION)), device=x.device)
    return grey_cutout(x, length, random, 32) / 255.0


def randaugment_disc_m5(images: Tensor, random: SampleRandom) -> Tensor:
    """:func:`randaugment_disc` at ``m = 5`` (DISC's CIFAR-10 strong view,
    ``randaugment.py:261-283``)."""
    return randaugment_disc(images, random, 5)


def randaugment_disc_m10(images: Tensor, random: SampleRandom) -> Tensor:
    """:func:`randaugment_disc` at ``m = 10`` (DISC's CIFAR-100, Clothing1M and others,
    ``randaugment.py:367-389``, ``:447-470``)."""
    return randaugment_disc(images, random, 10)


POLICY_FUNCTIONS = {
    "autoaugment-cifar10": autoaugment_cifar10,
    "randaugment-disc-m5": randaugment_disc_m5,
    "randaugment-disc-m10": randaugment_disc_m10,
}
