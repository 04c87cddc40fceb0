"""Fluid 1.8's dygraph-to-static translation (``@declarative``, ``ProgramTranslator``,
``jit.save``/``jit.load``): the source rewriting (:mod:`.ast_transform`), what the rewritten
code calls (:mod:`.convert_operators`), the programs per input signature
(:mod:`.program_translator`), a program run as one dygraph op (:mod:`.partial_program`) and
the saved layers (:mod:`.saving`)."""
