"""`flash_emulated`: the emulated FlashAttention (lra.numerics.emulation) as an attention backend, so that the
numerics study measures it beside the real kernels and the weights study trains a model with it.

It is registered when this module is imported (the numerics study imports it), not by the backend discovery of
`attention_impls`, which may not depend on the numerics package. Options: `preset` (see emulation.PRESETS), `form`,
one precision per knob (`inputs`, `s`, `m`, `l`, `p`, `o`, `rescale`: a dtype name, 'in' or 'acc'), and the tiles:
`block_m`, `block_n`, or FlashAttention-1's from `sram` (elements); `rounding` to fp16/bf16 (nearest or
toward_zero). No attention dropout; the backward is autograd
through the emulated forward (memory O(N^2), as naive).
"""

from __future__ import annotations

from typing import Any

import torch

from attention_impls.base import ALL_FLOAT, AttentionBackend, Capabilities
from attention_impls.masking import lengths_from_mask, zero_padded_outputs
from attention_impls.registry import register_backend
from lra.core.errors import ConfigError
from lra.numerics.emulation import build_emulation, emulated_attention

PREFIX = "emu:"  # `emu:PRESET` names an emulation in the numerics study


@register_backend("flash_emulated")
class EmulatedFlash(AttentionBackend):
    """FlashAttention-1/-2 (or baseline attention) with the precision of each intermediate chosen (numerics study)."""

    capabilities = Capabilities(
        dtypes=ALL_FLOAT, dropout=False, notes="numerics emulation: precision per intermediate; slow; plain PyTorch"
    )

    def __init__(
        self,
        *args,
        preset: str = "fa2-fp32-state",
        form: str | None = None,
        inputs: str | None = None,
        s: str | None = None,
        m: str | None = None,
        l: str | None = None,
        p: str | None = None,
        o: str | None = None,
        rescale: str | None = None,
        sram: int | None = None,
        block_m: int | None = None,
        block_n: int | None = None,
        rounding: str = "nearest",
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        knobs = {"inputs": inputs, "s": s, "m": m, "l": l, "p": p, "o": o, "rescale": rescale}
        self.preset = preset
        self.emulation = build_emulation(
            preset,
            head_dim=self.head_dim,
            form=form,
            sram=sram,
            block_m=block_m,
            block_n=block_n,
            rounding=rounding,
            **knobs,
        )

    def tile_shape(self, dtype: torch.dtype, device_type: str) -> tuple[int, int]:
        """(Br, Bc): the same on every device and dtype."""
        return self.emulation.block_m, self.emulation.block_n

    def forward(self, q, k, v, key_padding_mask=None):
        lengths = lengths_from_mask(key_padding_mask) if key_padding_mask is not None else None
        out = emulated_attention(q, k, v, self.emulation, lengths=lengths, scale=self.scale)
        return zero_padded_outputs(out, key_padding_mask)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, preset={self.preset}, {self.emulation.describe()}"


EMULATED = EmulatedFlash.name  # "flash_emulated", the name the numerics study builds it by


def implementation(label: str) -> tuple[str, dict[str, Any]]:
    """A study's implementation label -> (backend name, options).

    'naive' -> naive; 'emu:PRESET' -> flash_emulated with that preset; 'emu:PRESET+KNOB=VALUE+...' also sets
    options ('emu:fa1-all+o=fp32': FA1 all in the input format but an fp32 accumulator; integers for tiles).
    """
    if not label.startswith(PREFIX):
        return label, {}
    preset_name, *changes = label[len(PREFIX) :].split("+")
    options: dict[str, Any] = {"preset": preset_name}
    for change in changes:
        key, sep, value = change.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"{label!r}: write emulation changes as +KNOB=VALUE (e.g. emu:fa1-all+o=fp32)")
        options[key] = int(value) if value.isdigit() else value
    return EMULATED, options
