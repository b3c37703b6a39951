"""The fine-tune image's package: `python -m training.finetune ...` runs inside the pod.

No Django, and no heavy import here: the panel imports `training.protocol` to parse job logs.
"""
