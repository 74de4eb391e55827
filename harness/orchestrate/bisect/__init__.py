"""`nvbench bisect`: the search (search), the walk by timed A/Bs (by_time) and by counted work (by_work)."""
