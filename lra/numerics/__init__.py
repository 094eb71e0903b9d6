"""The numeric-deviation study of "Is Flash Attention Stable?" (Golden et al. 2024): `inputs` (draws), `reference`
(the fp64 golden), `metrics` (deviation, W1, slopes), `emulation` (FlashAttention with a precision per intermediate)
and `backend` (it as the `flash_emulated` backend), `forward` (the forward study), `figures` (the paper's Figs. 3-6),
`weights` (the weights study), `report` (tables, verdicts, records). See docs/numerics.md."""
