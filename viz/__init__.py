"""viz: look at what the engine records. Reads the graph; never changes it.

    python -m viz.graph models.bigram     the backward graph as a picture (viz.graph.draw(loss) in Python)
    python -m viz.trace models.tiny       the backward pass printed step by step (viz.trace.trace(loss))
    ag.detect_anomaly(pictures=viz.anomaly.pictures(dir))   the graph and trace page at the first NaN/inf

The submodules are not imported here, so `python -m viz.graph` runs cleanly
and `import viz` needs no Graphviz.
"""
