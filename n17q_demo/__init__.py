"""The demo's content, free of Django like the engine it feeds: the recorded runs that tell the three seed stories,
the seed scenario packages and the staged captures of the review queue. Loaded by `manage.py load_demo`."""
