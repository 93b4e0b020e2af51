"""Deprecated (issue 33): use `from attention_book.course import check`; kept until every chapter's check cells switch."""
from .course.checks import CASES, CHECKS, Result, check, evaluate  # noqa: F401
