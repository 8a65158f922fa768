"""The labels each noise kind makes for a given noise seed are pinned: shipped results were made
with them, so a change to how noise is generated must not change a single label (nor the true T
the labels were drawn from). The hashes are SHA-256 of the digits' noisy training labels (int64)
and of T (float32, row-stochastic ``T[i, j] = P(noisy=j | clean=i)``), recorded before the noise
kinds were gathered into one registry."""

from __future__ import annotations

import hashlib

import pytest
import torch

from noisylabels.data import DigitsDataModule

PINNED: dict[tuple[str, float, int], tuple[str, str | None]] = {
    ("none", 0.2, 0): (
        "41fe26d5a937e38069b87f4836e7de0e8633475589d642abf831aea037dccaed",
        "77c0baf32850e55ce77945f5c2a6240043b7445c20ff10ab6c1c16cbcd699447",
    ),
    ("none", 0.2, 1): (
        "41fe26d5a937e38069b87f4836e7de0e8633475589d642abf831aea037dccaed",
        "77c0baf32850e55ce77945f5c2a6240043b7445c20ff10ab6c1c16cbcd699447",
    ),
    ("none", 0.4, 0): (
        "41fe26d5a937e38069b87f4836e7de0e8633475589d642abf831aea037dccaed",
        "77c0baf32850e55ce77945f5c2a6240043b7445c20ff10ab6c1c16cbcd699447",
    ),
    ("none", 0.4, 1): (
        "41fe26d5a937e38069b87f4836e7de0e8633475589d642abf831aea037dccaed",
        "77c0baf32850e55ce77945f5c2a6240043b7445c20ff10ab6c1c16cbcd699447",
    ),
    ("symmetric", 0.2, 0): (
        "6eb962d9225be2023683a1e2410ac88d22687904b8ce36b55bc7a6e276568a03",
        "286cdca4cbe4d36e580b3046c54cfe6d89f641e7ecb6419052d3c05d12394e03",
    ),
    ("symmetric", 0.2, 1): (
        "8cc7539b465dea2c202155e39cb4c4b4ad43f774ace9add79072601aef782cf1",
        "286cdca4cbe4d36e580b3046c54cfe6d89f641e7ecb6419052d3c05d12394e03",
    ),
    ("symmetric", 0.4, 0): (
        "51bfd8a792f9cee76ff51a4db4787775fd6ee857e0504837bc2fe5f280dd2d3a",
        "852e1d63423e66024f87b69ea2e82932d2e5df5f536d87f404752e5cc0920368",
    ),
    ("symmetric", 0.4, 1): (
        "822fbc9b0e051525d2f5c2bdc84da07133acf63b28c981e1644a7059fd10f598",
        "852e1d63423e66024f87b69ea2e82932d2e5df5f536d87f404752e5cc0920368",
    ),
    ("pair", 0.2, 0): (
        "5faaf85f1da4d297ff697406f9a75ca6dcd0e03aa8118693d9a718a4786afe72",
        "cd70300eb4270f2d487a73761ee4cc403be1a75e5493a9af21372828a646bbfc",
    ),
    ("pair", 0.2, 1): (
        "9d9770303975fba61e09f9bac2d5b15cc176b9031b2d272fba15b9404f7ab6be",
        "cd70300eb4270f2d487a73761ee4cc403be1a75e5493a9af21372828a646bbfc",
    ),
    ("pair", 0.4, 0): (
        "535a2ff28678456c61ce84d316e18ef3e378198e184858feb71f5036312c52c4",
        "944b22b75bdc7fb91cf5f875cf16c3b963ab6ce33ebbea4eba3866eb0ccfda09",
    ),
    ("pair", 0.4, 1): (
        "46581f1977ad3008b38ad150f852f3f10c52b4ee9f9447da29cbbc251d058f14",
        "944b22b75bdc7fb91cf5f875cf16c3b963ab6ce33ebbea4eba3866eb0ccfda09",
    ),
    ("asymmetric", 0.2, 0): (
        "cec339aefcb3989fd5d3caa8006efced3d2c15d95993e0df88d04efa71c2877a",
        "f8abb1de39122f3dff21c2409d00383ef042e789ecb0383ab7d375688f44c22f",
    ),
    ("asymmetric", 0.2, 1): (
        "57fa4befebd359402bb6f0ef1e53fcd3df7b56e385ff3f7b64267a5b368d581a",
        "0964db4e612b086293cfce3274584340f8c97acbc046c34969ccf044c509252b",
    ),
    ("asymmetric", 0.4, 0): (
        "7349a9f9478f8946cc33d0f0884e345558773eb856397c991877b2f4c10eb1c4",
        "69c1ed04b3a6abc039c9499f7636f962d5a928319bb077634d8f124dfe19710e",
    ),
    ("asymmetric", 0.4, 1): (
        "1a2502fbe52f6e03180bf73b0bf5931cf703442a45fc9b2be49a53d0169eb189",
        "3f3e040715ae6b33d0e4df7e8388adb785d430c6867574c43a573211fecfb8fd",
    ),
    ("semantic", 0.2, 0): (
        "ee25926c5026657e0745bf04a7a65f5109da0dd31ea9e38d10eafe5fbb00556d",
        "b702d271d4faab870be781115fff3d2df29607bced1d3efc97b01a9c2afccab5",
    ),
    ("semantic", 0.2, 1): (
        "aad789b1a4ff7adfa302f3bdc7049be45c71f67b8287257ddae9262c5e405f4e",
        "b702d271d4faab870be781115fff3d2df29607bced1d3efc97b01a9c2afccab5",
    ),
    ("semantic", 0.4, 0): (
        "adae30e060dbc2507ed99ad365da1514a9c0211e2269aa0bacf2e3fb0fc5e47c",
        "1dc43549747223664fee4a5b40d9122b6176c4af7fa2d0eae6bb264eee3ffd15",
    ),
    ("semantic", 0.4, 1): (
        "fb8869077303a79fc63c179a83c35d4f1c9ea04ebd1a1fa6cb6836fdfe241d9d",
        "1dc43549747223664fee4a5b40d9122b6176c4af7fa2d0eae6bb264eee3ffd15",
    ),
    ("instance", 0.2, 0): (
        "0f5df672ff6eb7f73991da3d64e01743e307a9a32a0ce471c0ce482e1b5f9342",
        None,
    ),
    ("instance", 0.2, 1): (
        "315cdf9aa903fb01b2cc4fbd320c5c70d89acfbd8ceb20d0c7a40af0ba8ff6bc",
        None,
    ),
    ("instance", 0.4, 0): (
        "006142059e0b5542b9c5271b8da5dea0b0e014a4cd2ac6e411db3b82f88ab775",
        None,
    ),
    ("instance", 0.4, 1): (
        "74f49be8abcae0a88c5688272ef2e3c9ebaf440a09d155b080bddb158691d306",
        None,
    ),
}


def _sha256(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


@pytest.mark.parametrize(("kind", "rate", "seed"), sorted(PINNED))
def test_noisy_labels_of_each_kind_are_unchanged(kind: str, rate: float, seed: int) -> None:
    dm = DigitsDataModule(noise_type=kind, noise_rate=rate, noise_seed=seed)
    dm.setup("fit")
    labels, transition = PINNED[(kind, rate, seed)]
    assert _sha256(dm.noisy_labels.to(torch.int64)) == labels
    if transition is None:
        assert dm.transition is None
    else:
        assert _sha256(dm.transition.to(torch.float32)) == transition
