"""The catalogue of rejected inputs, a module per public area (ops,
schedules, agc, optim) over the shared vocabulary of ``builders``;
tests/bad_inputs_cases.py assembles the lists."""
