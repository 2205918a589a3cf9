"""The DRA CEL environment: variables, the Kubernetes libraries, missing keys as errors."""

from __future__ import annotations

import pytest

from drakit.allocator.celenv import Environment, default_environment

DEV = {"name": "g0",
       "attributes": {"model": {"string": "a100"}, "driverVersion": {"version": "1.2.3-rc.1"},
                      "numa.example.org/node": {"int": 1}, "healthy": {"bool": True}},
       "capacity": {"memory": {"value": "40Gi"}, "cores": {"value": "8"}}}


@pytest.fixture(scope="module")
def env() -> Environment:
    return default_environment()


@pytest.mark.parametrize("expr,value", [
    ('device.driver == "gpu.example.com"', True),
    ('device.attributes["gpu.example.com"].model == "a100"', True),
    ('device.attributes["gpu.example.com"].healthy', True),
    ('device.attributes["numa.example.org"].node == 1', True),
    ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40960Mi")) == 0', True),
    ('device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("32Gi"))', True),
    ('device.capacity["gpu.example.com"].cores.asInteger() == 8', True),
    ('device.capacity["gpu.example.com"].memory == quantity("40Gi")', True),
    ('device.attributes["gpu.example.com"].driverVersion.isLessThan(semver("1.2.3"))', True),
    ('device.attributes["gpu.example.com"].driverVersion.major() == 1', True),
    ('semver("1.2.3+build") == semver("1.2.3")', True),
    ('semver("v01.2", true) == semver("1.2.0")', True),
    ('isSemver("1.2") || isQuantity("1x")', False),
    ('cel.bind(g, device.attributes["gpu.example.com"], g.model.startsWith("a1") && g.healthy)',
     True),
    ('device.attributes["gpu.example.com"].?nosuch.orValue("x") == "x"', True),
    ('has(device.attributes["gpu.example.com"].model)', True),
    ('"gpu.example.com" in device.attributes && !("x.org" in device.attributes)', True),
    ('device.allowMultipleAllocations == false', True),
    ('"a100-80g".find("[0-9]+g") == "80g"', True),
    ('"%s:%d".format(["a", 1]) == "a:1"', True),
    ('"A100".lowerAscii() == "a100"', True),
    ('[3, 1, 2].sort() == [1, 2, 3] && [1, 2].isSorted() && [1, 2, 3].sum() == 6', True),
    ('sets.contains([1, 2, 3], [2]) && sets.intersects([1], [1, 5])', True),
    ('[[1], [2, 3]].flatten().indexOf(3) == 2', True),
    ('[1, 2].includes(2)', True),
])
def test_values(env: Environment, expr: str, value: bool) -> None:
    out = env.evaluate(env.compile(expr), env.device_value("gpu.example.com", DEV))
    assert out.error == ""
    assert out.value is value


@pytest.mark.parametrize("expr,error", [
    ('device.attributes["gpu.example.com"].nosuch == "x"', "no such key: nosuch. consider"),
    ('device.attributes["other.example.org"].model == "x"', "no such key: model"),
    ('device.capacity["gpu.example.com"].nosuch.isZero()', "compilation failed"),
    ('quantity("12x") == quantity("1")', "not a quantity"),
    ('nosuch == 1', "compilation failed: ERROR: <input>:1:1: undeclared reference to 'nosuch'"),
    ('device.driver', "could not be converted to bool"),
])
def test_errors(env: Environment, expr: str, error: str) -> None:
    out = env.evaluate(env.compile(expr), env.device_value("gpu.example.com", DEV))
    assert out.value is None
    assert error in out.error


def test_compile_cache(env: Environment) -> None:
    assert env.compile("true") is env.compile("true")
