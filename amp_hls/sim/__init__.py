"""RTL simulation: Verilator builds through cocotb's runner, and message-level AXI-stream drivers."""
