"""Pure attention functions: TRA (naive reference and fast paths) and the baselines' reference math."""
