"""What happens to rankings after the legs: fusion, feedback, blends, rerank and MMR."""
