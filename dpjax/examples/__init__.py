"""Worked examples of the estimator protocol (see ``docs/adding_an_estimator.md``).

Importing a module here registers its estimator in :mod:`dpjax.registry`.
"""
