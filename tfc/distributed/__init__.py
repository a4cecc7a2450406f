"""Running tfc programs on many processes and hosts (Ray): tasks, their actors, the cluster."""
