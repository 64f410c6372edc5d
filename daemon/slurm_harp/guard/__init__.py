"""`harp guard`: extends the running jobs harp shortened, up to their users' own limits."""
