"""Every mistake of a spec said at once: each rule runs on its own and what it raises is kept.

A spec with a batch that does not divide, an egress without its policy and a bad label used
to take three runs, one refusal each. The rules (`launcher.core.validation`,
`launcher.core.limits`) still raise their one `SpecError`; `Mistakes.check` runs one rule and
keeps its error, and `raise_any` raises them together (`SpecErrors`, one line).
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.core.errors import SpecError, SpecErrors


class Mistakes:
    """The SpecErrors of the rules run so far, in the order they were found."""

    def __init__(self) -> None:
        self._errors: list[SpecError] = []

    def check(self, rule: Callable[..., object], *args: object) -> None:
        """Run one rule; keep the mistake it raises. A rule that fails in another way on a
        spec already found wrong is reading a consequence of that mistake (a name too long to
        render, say): it adds nothing, and the mistakes found are what the user must fix."""
        try:
            rule(*args)
        except SpecError as error:
            self.add(error)
        except Exception:
            if not self._errors:
                raise

    def add(self, error: SpecError) -> None:
        for one in error.errors if isinstance(error, SpecErrors) else (error,):
            if str(one) not in {str(known) for known in self._errors}:
                self._errors.append(one)

    def raise_any(self) -> None:
        """Raise the mistakes found: the one SpecError, or all of them as SpecErrors."""
        if self._errors:
            raise SpecErrors.of(self._errors)
