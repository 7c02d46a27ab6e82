"""The numeric core of dpgate: pure functions over numpy arrays.

Nothing in this package imports a web framework or a database driver.
"""
