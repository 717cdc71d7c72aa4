"""What every page shares, kept in one room: the legend and the tables of methods, sweeps and discussion
(``tables``), a procedural task's accuracy tables and notes (``accuracy``), the length x depth grid of retrieval tasks
(``grid``), the plots (``plots``), and the section and summary of a task that needs nothing of its own
(``procedural``). Experiment packages hold their data and presets and compose their sections from these; none imports
another."""
