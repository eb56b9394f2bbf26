"""The Python client of the mlscope HTTP API (`mlscope api`), over requests.

    from mlscope.client import Client

    client = Client()                                    # MLSCOPE_API_URL, and a token (see Client)
    accepted = client.submit({"model": "resnet18", "framework": "onnxruntime", "batch_sizes": [1, 8]})
    [result] = client.wait([accepted["id"]])
    table = client.compare(ids=[accepted["id"]])

Every method returns the parsed JSON answer. An error answer raises `ApiError` (a `UserError`) with the
status, the problem document and its per-field errors; an unreachable API raises `UserError` saying so.
"""

from mlscope.client.api import TERMINAL_STATUSES, Client, WaitTimeout
from mlscope.client.errors import ApiError

__all__ = ["TERMINAL_STATUSES", "ApiError", "Client", "WaitTimeout"]
