"""HyperPod L2 protocol front door (LMCache's ``sagemaker-hyperpod`` client).

Only request routing exists so far; the server is not built yet.
"""
