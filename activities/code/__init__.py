"""The activities of the user's own code (floor 3 of activities/): `@pipeline` and describing a
pipeline or a fork's record (pipelines.py), LangGraph graphs and LangChain tools a module offers
(graphs.py), a graph's node run as one activity (graph_nodes.py), and an experiment's fork / watch / score activities."""
