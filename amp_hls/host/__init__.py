"""The host: devices behind one interface, and the loop that drives them."""

from .cpu import CpuDevice
from .device import Device, DeviceCounters, DeviceError, DeviceFault, DeviceTimeout

__all__ = ["CpuDevice", "Device", "DeviceCounters", "DeviceError", "DeviceFault", "DeviceTimeout"]
