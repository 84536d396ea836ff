"""An activity's liveness (floor 0 of activities/): heartbeats while it awaits something slow,
and the hand-over of a dead worker's run to a live one (takeover.py)."""
