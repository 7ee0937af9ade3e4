# scipy's and numpy's extension modules cannot be imported twice in one process; load them
# before pytester's in-process runs snapshot and restore sys.modules.
import scipy.stats  # noqa: F401

pytest_plugins = ["pytester"]
