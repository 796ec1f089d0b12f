"""The torchrun learner service: FSDP2 GRPO updates driven over a local HTTP control endpoint."""
