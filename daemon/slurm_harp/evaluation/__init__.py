"""Offline evaluation: chronological splits, baselines, cost model and reports (`harp evaluate`)."""
