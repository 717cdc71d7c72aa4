"""The spread of training lengths (length_spread=0.75) as a column of the comparison, every
method of the rivals' comparison with and without it, against the authors' TRA, on every bar that a spread question
answers (text has no spread rows: the rivals' scorecard holds its bar)."""

from tra_attn.experiments.methods import with_and_without_spread
from tra_attn.experiments.spec import Bar, Scorecard

# Randomized positions span each task's longest test, so they differ per task: read by label, as one row.
ROWS = tuple(method.label if "random_positions" in method.options else method for method in with_and_without_spread(1))

spec = Scorecard(
    title="The spread for every method: with and without the spread of training lengths, which method is exact on "
    "flip-flop and at the longest length on majority and passkey, and fits every task, against the authors' TRA?",
    baseline=ROWS[0],
    candidates=ROWS[1:],
    bars=(
        Bar("exact", "flipflop_spread"),
        Bar("longest", "majority_spread"),
        Bar("longest", "passkey_spread"),
        Bar("fits", "flipflop_spread"),
        Bar("fits", "majority_spread"),
        Bar("fits", "mqar_spread"),
        Bar("fits", "hierarchy_spread"),
        Bar("fits", "passkey_spread"),
    ),
)
