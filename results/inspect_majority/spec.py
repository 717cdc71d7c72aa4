"""Which keys do fitted-but-not-invariant TRA models keep at 8x on majority that exact ones drop?"""

from tra_attn.experiments.methods import RECOMMENDED
from tra_attn.experiments.spec import Inspection

spec = Inspection(
    title="What TRA keeps: which keys do fitted-but-not-invariant models keep at 8x on majority that exact ones drop, "
    "in which layer, and does the count of relevant keys drift?",
    name="majority_six_seeds",
    method=RECOMMENDED,
    seeds=(0, 3, 1, 4),
    labels=("exact_s0", "exact_s3", "failing_s1", "failing_s4"),
    lengths=(1, 2, 8),
    sequences=64,
)
