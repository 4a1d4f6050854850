"""viz: look at what the engine records. Reads the graph; never changes it.

    python -m viz.graph models.bigram     the backward graph as a picture (viz.graph.draw(loss) in Python)
    python -m viz.trace models.tiny       the backward pass printed step by step (viz.trace.trace(loss))
    ag.detect_anomaly(pictures=viz.anomaly.pictures(dir))   the graph and trace page at the first NaN/inf
    python -m viz.jacobian softmax        an op's Jacobian beside its closed form (viz.jacobian.draw(fn, x))
    python -m viz.diverge models.tiny --a fused --b composed   where two runs part (ag.diverge), on the graph
    python -m viz.graph models.tiny --flow E   each part's share of a summed gradient (viz.flow.Flow)

The submodules are not imported here, so `python -m viz.graph` runs cleanly
and `import viz` needs no Graphviz.
"""
