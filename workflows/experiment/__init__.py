"""Experiments (floor 2 of workflows/): ExperimentWorkflow (one checkpoint forked N ways x K
repetitions) and ScoreWorkflow. Imports the vocabulary and the loop."""
