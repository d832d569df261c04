"""The framework recipes of docs/guides/frameworks.md, each run on backend accord and on gloo
with the results compared. All but the pipelining one run only with ``pytest --frameworks``
(install the frameworks with the extra ``frameworks``)."""
