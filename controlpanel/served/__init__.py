"""Served models, the product's "apps": a workload kind (controlpanel/kinds.py) serving a model
behind an OpenAI-compatible URL until stopped, at the same URL after every start. (Not named
`apps`: Django's own apps.py and AppConfig would collide with it.)"""
