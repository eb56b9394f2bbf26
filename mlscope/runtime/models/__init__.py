"""Models mlscope makes itself (trained here, from data that ships offline), each a module whose
`make_model()` a manifest's `python` source names: `mlscope:digits_cnn` is `digits_cnn`."""
