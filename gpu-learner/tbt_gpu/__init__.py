"""thinkingbox-temporal Python side: model store, embedded CPU policy server and learner."""
