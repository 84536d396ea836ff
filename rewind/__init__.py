"""Rewind: durable, inspectable and forkable LLM agent runs on Temporal."""
