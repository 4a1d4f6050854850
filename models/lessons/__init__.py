"""models.lessons: the seeds' lessons, number for number; each model's module has a demo_loss() for viz.

    bigram        lesson 1's bigram model, trained by the engine
    softmax       lesson 000's softmax Jacobian beside diag(p) − ppᵀ
    tiny          the worked article's one-layer transformer, 我爱 → 你
    neuron        chapter one's neuron on Value, with micrograd's lecture numbers
    value_nn      chapter one's network on Value: Neuron, Layer, MLP
    moons         micrograd's demo: an MLP on Value separates two half-moons
    troubleshoot  three ways training a GPT fails, and what the tools say
    newton        Newton-CG by Hessian-vector products beside gradient descent, on the bigram
"""
