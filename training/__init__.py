"""The fine-tune image's package: `python -m training.finetune ...` runs inside the pod. No Django."""
