"""Table 3 (§6.2): its rows as configuration changes, their parameter counts, and the rows rerun small.

Counts assume the paper's shared En-De vocabulary of about 37,000 BPE pieces (§5.1), one matrix for
both embeddings and the pre-softmax projection (§3.4), and sinusoids (no parameters), as aiayn builds it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..config import ModelConfig
from ..model import Transformer

PAPER_VOCAB = 37_000


class Table3Row(NamedTuple):
    """One row of Table 3: the change from the base model, dev perplexity and BLEU, parameters x 10^6."""

    group: str
    label: str
    changes: dict[str, Any]
    ppl: float
    bleu: float
    params_m: float | None  # None where the table leaves the cell empty (the base model's 65)


TABLE3: tuple[Table3Row, ...] = (
    Table3Row("base", "base", {}, 4.92, 25.8, 65),
    Table3Row("A", "h=1", {"n_heads": 1}, 5.29, 24.9, None),
    Table3Row("A", "h=4", {"n_heads": 4}, 5.00, 25.5, None),
    Table3Row("A", "h=16", {"n_heads": 16}, 4.91, 25.8, None),
    Table3Row("A", "h=32", {"n_heads": 32}, 5.01, 25.4, None),
    Table3Row("B", "d_k=16", {"d_k": 16}, 5.16, 25.1, 58),
    Table3Row("B", "d_k=32", {"d_k": 32}, 5.01, 25.4, 60),
    Table3Row("C", "N=2", {"n_layers": 2}, 6.11, 23.7, 36),
    Table3Row("C", "N=4", {"n_layers": 4}, 5.19, 25.3, 50),
    Table3Row("C", "N=8", {"n_layers": 8}, 4.88, 25.5, 80),
    Table3Row("C", "d_model=256", {"d_model": 256}, 5.75, 24.5, 28),
    Table3Row("C", "d_model=1024", {"d_model": 1024}, 4.66, 26.0, 168),
    Table3Row("C", "d_ff=1024", {"d_ff": 1024}, 5.12, 25.4, 53),
    Table3Row("C", "d_ff=4096", {"d_ff": 4096}, 4.75, 26.2, 90),
    Table3Row("D", "P_drop=0.0", {"p_drop": 0.0}, 5.77, 24.6, None),
    Table3Row("D", "P_drop=0.2", {"p_drop": 0.2}, 4.95, 25.5, None),
    Table3Row("D", "eps_ls=0.0", {"label_smoothing": 0.0}, 4.67, 25.3, None),
    Table3Row("D", "eps_ls=0.2", {"label_smoothing": 0.2}, 5.47, 25.7, None),
    Table3Row("E", "learned positions", {"positions": "learned"}, 4.92, 25.7, None),
    Table3Row("big", "big", {"preset": "big"}, 4.33, 26.4, 213),
)
TRAIN_FIELDS = {"label_smoothing"}  # changes of the recipe's train section, not of the model


def has_d_k_field() -> bool:
    """Whether ModelConfig holds d_k as its own field (Table 3 row B), not only d_model / h."""
    return "d_k" in ModelConfig.__dataclass_fields__


def row_config(row: Table3Row, base: ModelConfig) -> ModelConfig | None:
    """The model of a row: base with the row's changes (None where this ModelConfig cannot express it)."""
    changes = {k: v for k, v in row.changes.items() if k not in TRAIN_FIELDS}
    if "preset" in changes:
        return ModelConfig.preset(changes.pop("preset"), vocab_size=base.vocab_size, **changes)
    if "d_k" in changes and not has_d_k_field():
        return None
    return base.replace(**changes)


def parameter_count(config: ModelConfig) -> int:
    """Trainable parameters of the model, built on the meta device (no memory, no initialisation)."""
    with torch.device("meta"):
        return Transformer(config).num_parameters()


def table3_counts(vocab_size: int = PAPER_VOCAB) -> list[dict[str, Any]]:
    """Every row's parameter count in millions beside the table's column (65 for rows left empty there)."""
    base = ModelConfig.preset("base", vocab_size=vocab_size)
    rows = []
    for row in TABLE3:
        config = row_config(row, base)
        rows.append(
            {
                "group": row.group,
                "label": row.label,
                "paper_m": row.params_m if row.params_m is not None else 65,
                "paper_cell_empty": row.params_m is None,
                "counted_m": None if config is None else parameter_count(config) / 1e6,
            }
        )
    return rows
