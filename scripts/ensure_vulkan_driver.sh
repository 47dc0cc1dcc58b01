#!/usr/bin/env bash
# Make sure a Vulkan loader and a driver (and g++, for the device kit's runner) are present for the execution tests.
# On Debian/Ubuntu as root: installs libvulkan1 + mesa-vulkan-drivers (lavapipe,
# a CPU Vulkan driver) when missing. Elsewhere it only says what is missing:
# the tests that need a device then skip locally (and fail in CI).
set -u
# The device kit's runner (tests/vulkan/test_device_kit.py) is compiled with g++.
if ! command -v g++ >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing g++ (the Vulkan device kit's runner)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
fi
if ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' && ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing the Vulkan loader and lavapipe (libvulkan1 mesa-vulkan-drivers)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq libvulkan1 mesa-vulkan-drivers >/dev/null
  exit $?
fi
echo "note: no Vulkan driver found; install libvulkan1 and a driver (e.g. mesa-vulkan-drivers) to run the Vulkan execution tests" >&2
exit 0
