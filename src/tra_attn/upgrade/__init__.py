"""One boundary for the formats of earlier versions: everything released (0.1 and 0.2 runs, checkpoints, saved
and Hugging Face folders, result rows) is converted here, by ``tra upgrade PATH``; the config classes read only
the current version."""
