"""Passkey retrieval: the paper's methods, TRA's recommended configuration and the newer rivals, 3 seeds."""

from tra_attn.experiments.methods import NEWEST, against_the_rivals, with_first_runs
from tra_attn.experiments.spec import Question

spec = Question(
    title="Passkey: which methods retrieve a 4-digit key at every depth from 1x to 16x the training length?",
    task="passkey",
    methods=(*with_first_runs(against_the_rivals(1024)), *NEWEST),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
