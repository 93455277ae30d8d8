"""The heap report: bounded aggregates of the model (data.py, paths.py) turned into one
self-contained HTML page (html.py) or folded stacks. Sits between commands and render:
it reads the model and is never imported by it."""
