"""Sharing one GPU between servers (issue 26): the admin's policy and a share's sizes.

A *share* is ``K`` of the ``N`` equal parts a GPU is split into (``"1/4"``); a GPU held
by shares is never given whole, and a GPU held whole is never shared.
:mod:`.policy` parses and checks the admin's rules (per GPU model, per node) and answers
"may this GPU be shared, into how many parts, how much memory each, in which mode";
placement (``core.placement.shares``) packs shares with it. Pure: no I/O.
"""

from jupyterhub_gpu.core.sharing.policy import (
    MODES,
    Share,
    ShareRule,
    SharingPolicy,
    parse_policy,
)

__all__ = ["MODES", "Share", "ShareRule", "SharingPolicy", "parse_policy"]
