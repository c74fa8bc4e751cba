# Writes OUT, a C file defining `const char NAME[]` with the bytes of IN and a closing NUL (the view's page template).
# cmake -DIN=... -DOUT=... -DNAME=... -P embed.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* Made by cmake/embed.cmake from ${IN}: do not edit. */\nconst char ${NAME}[] = {\n${bytes}0x00};\n")
