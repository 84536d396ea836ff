"""Read-side views of the checkpoint store, for people: the tree, one checkpoint
and an export (inspect.py), the diff of two branches (diff.py), `rewind stats`
(stats.py, and its `--by` groups: stats_by.py), runs as data for `rewind export
--runs` (step_rows.py, parquet.py, conversations.py), the tree as a graph (tree_graph.py), an experiment's table
(experiment_table.py) and the HTML viewer (viewer.py, viewer_page.html)."""
