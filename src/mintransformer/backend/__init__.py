"""The only backend-specific code, one concern per module.

    selection.py     choosing the Keras backend before Keras starts
    kernels.py       what layers and the loss call: dropout masks, LayerNorm's gradient,
                     the arg-max, whether to use the fused attention kernel
    optimizer.py     Adam (FusedAdam on TensorFlow)
    compilation.py   compiling inference functions
    runtime.py       threads, allocator, batch width, seeding
    precision.py     fp32 or bf16 for the hardware
    distribution.py  data parallelism with keras.distribution (JAX)

Everything outside this package is written in `keras.ops`.
"""
