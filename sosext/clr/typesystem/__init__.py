"""Types as the runtime knows them: MethodTables, their names (the runtime's and C#'s),
fields, enums, modules and signatures."""
