"""A pilot for text_tra_variants: does the authors' block help TRA in particular or every kind?"""

from tra_attn.experiments.methods import Method
from tra_attn.experiments.spec import Question

PAPER_BLOCK = {"block_style": "paper"}

spec = Question(
    title="Text: does the authors' block (x = norm(x); x = x + f(x)) help TRA in particular or every kind?",
    task="lm",
    methods=(
        Method("tra", model=PAPER_BLOCK),
        Method("fox", model=PAPER_BLOCK),
        Method("tra", options={"dense_heads": 1}, model=PAPER_BLOCK),
    ),
    seeds=(0,),
    lrs=(3e-3, 1e-2),
    status="pilot",
)
