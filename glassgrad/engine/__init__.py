"""Ties schedule, codegen and runtime together: realize() runs a schedule."""
