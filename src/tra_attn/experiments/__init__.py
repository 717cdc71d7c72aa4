"""End-to-end experiments built from the task, model, training and evaluation pieces."""
