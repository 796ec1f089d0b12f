"""Embedded CPU policy server speaking the vLLM/OpenAI subset that our rollouts use.

``app`` routes HTTP, ``protocol`` validates requests and shapes responses, ``batcher`` groups concurrent
requests (and orders weight reloads between batches), ``engine`` owns the model and runs batched
generation, ``sampling`` turns logits into tokens and logprobs. Run it with ``python -m
tbt_gpu.policy_server --model DIR``.
"""
