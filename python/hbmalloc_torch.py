"""The first name of hbmalloc.torch, kept working: `import hbmalloc_torch` gives that very module (one module
object, one set of state), so `hbmalloc_torch.use()` and `hbmalloc.torch.use()` are the same call."""
import sys

import hbmalloc.torch as _module

sys.modules[__name__] = _module
