"""Every input typed once, at the boundary: the shared field types and the base model (issue 33).

- :mod:`labwright.schema.fields`: the field types every schema uses (``Url``, ``ListenAddress``, ``Port``,
  ``AbsPath``, ``ManagedDir``, ``UserName``, ``Size``, ``Duration``, ``Version``, ``PackageName``, ``Secret``,
  ``StrictBool``) as pydantic v2 ``Annotated`` types, and the plain check functions behind them.
- :mod:`labwright.schema.model`: :class:`~labwright.schema.model.Schema` (unknown keys refused) and
  :func:`~labwright.schema.model.error_line`, the one function that turns a pydantic ``ValidationError`` into
  labwright's one-line error naming the key as the user wrote it.

This package imports nothing itself: pydantic is loaded only where data is parsed (``from labwright.schema.fields
import Port`` inside the function that reads the data), so ``labwright --help`` does not pay for it.
"""
