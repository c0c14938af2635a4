-- The diloco Lua module as a rock: `luarocks make` in a checkout builds diloco.so with
-- the project's own CMakeLists.txt (DLC_LUAROCKS=ON: the module and diloco/*.lua only)
-- against the system libraries (Debian 12: liblua5.4-dev, libopenblas-dev, libdnnl-dev,
-- libjansson-dev, zlib1g-dev, which scripts/setup installs) and puts it in the rocks tree:
--     luarocks --lua-version 5.4 make --tree TREE diloco-dev-1.rockspec
--     eval "$(luarocks --lua-version 5.4 --tree TREE path)"; lua5.4 -e 'require "diloco"'
-- The diloco-lua executable and the C library are installed by CMake, not by this rock
-- (README.md, "Installing").
rockspec_format = "3.0"
package = "diloco"
version = "dev-1"
source = {
  -- No public repository yet: `luarocks make` builds the checkout it is run in.
  url = "git+file://.",
}
description = {
  summary = "Decoupled DiLoCo training engine for Lua 5.4: tensors, autograd, nn, optimizers",
  detailed = [[
    f32 tensors with reverse-mode autograd in C (libdiloco), neural-network modules,
    AdamW/SGD, data loaders with shards and resumable cursors, safetensors checkpoints,
    and the Decoupled DiLoCo machinery: codecs, fragment plans, the syncer and learner
    state machines and a virtual-time simulator.
  ]],
  license = "MIT",
}
dependencies = {
  "lua >= 5.4, < 5.5",
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    DLC_LUAROCKS = "ON",
    DLC_BUILD_TESTS = "OFF",
    DLC_BUILD_BENCH = "OFF",
    DLC_INSTALL_LUA_CMOD = "$(LIBDIR)",
    DLC_INSTALL_LUA_LMOD = "$(LUADIR)",
    LUA_INCLUDE_DIR = "$(LUA_INCDIR)",
  },
}
