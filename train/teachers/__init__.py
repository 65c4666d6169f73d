"""Teachers' data: corpora of games between USI engines, rescoring by an engine, distillation games."""
